import { existsSync } from 'node:fs';
import { privatePostgresAvailability } from './privatePostgres.ts';

// `npm test` runs some suites only where they can run: PostgreSQL for real concurrency, crashes,
// several instances and NOTIFY; Chromium for the browser suite; root and the PostgreSQL server
// package for restarting a private cluster. Rather than skip them in silence, the global setup prints
// one line per group that will not run, with how to enable it.

export interface SkipProbe {
  env: NodeJS.ProcessEnv;
  chromiumExists(path: string): boolean;
  privatePostgres(): { bin: string } | { reason: string };
}

const PG_HINT =
  'set TEST_DATABASE_URL, e.g. TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm test';

export function skippedSuites(probe: SkipProbe): string[] {
  const lines: string[] = [];
  const ci = probe.env.CI === 'true';
  if (!probe.env.TEST_DATABASE_URL) {
    lines.push(
      `skipped: concurrency suites (test/checkout/concurrency.test.ts, test/x402/concurrency.test.ts, test/spend/concurrency.test.ts, test/tasks/next.test.ts, concurrent registration and migrations) need PostgreSQL: ${PG_HINT}`,
      `skipped: crash suites (test/checkout/crash.test.ts, test/webhooks/crash.test.ts) need PostgreSQL: ${PG_HINT}`,
      `skipped: scale suites (test/scale: several instances, database faults) need PostgreSQL: ${PG_HINT}`,
      `skipped: notify suite (test/foundation/notify.test.ts, NOTIFY after commit) needs PostgreSQL: ${PG_HINT}`,
      `skipped: tunnel restart suite (test/tunnels/process.test.ts, the tunnel client reconnecting after the service is killed) needs PostgreSQL: ${PG_HINT}`,
    );
  } else if (!ci) {
    const pg = probe.privatePostgres();
    if (!('bin' in pg)) {
      lines.push(
        `skipped: PostgreSQL restart test (test/scale/faults.test.ts) starts a private cluster, which ${pg.reason}`,
      );
    }
  }
  const chromium = probe.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (!ci && !probe.chromiumExists(chromium)) {
    lines.push(
      `skipped: browser suite (test/browser) needs Chromium at ${chromium}: apt-get install chromium, or set CHROMIUM_PATH`,
    );
  }
  return lines;
}

/** True when the command line names test files or a name filter (then the notice would be noise). */
export function runIsFiltered(argv: readonly string[]): boolean {
  const withValue = new Set(['--project', '--reporter', '--config', '-c', '--root', '-r', '--maxWorkers']);
  const start = argv.findIndex((a) => /vitest(\.mjs)?$/.test(a));
  const args = argv.slice(start >= 0 ? start + 1 : 2);
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '-t' || a.startsWith('-t=') || a.startsWith('--testNamePattern')) return true;
    if (withValue.has(a)) i++;
    else if (!a.startsWith('-') && !['run', 'watch', 'dev'].includes(a)) return true;
  }
  return false;
}

/** The lines for this run, once per process (every project runs the global setup). */
export function skipNotice(): string[] {
  const g = globalThis as { __botpaySkipNoticeShown?: boolean };
  if (g.__botpaySkipNoticeShown || runIsFiltered(process.argv)) return [];
  g.__botpaySkipNoticeShown = true;
  return skippedSuites({
    env: process.env,
    chromiumExists: existsSync,
    privatePostgres: privatePostgresAvailability,
  });
}
