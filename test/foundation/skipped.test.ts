import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runIsFiltered, skippedSuites } from '../support/skipped.ts';

// Issue 15 item 8: suites that cannot run here are named, one line per group, with how to run them.

const none = { chromiumExists: () => true, privatePostgres: () => ({ bin: '/usr/lib/postgresql/15/bin' }) };

describe('skipped suites notice', () => {
  it('names each PostgreSQL group and the browser suite, each with how to enable it', () => {
    const lines = skippedSuites({
      env: {},
      chromiumExists: () => false,
      privatePostgres: () => ({ reason: 'x' }),
    });
    expect(lines).toHaveLength(6);
    for (const group of ['concurrency', 'crash', 'scale', 'notify'])
      expect(lines.find((l) => l.startsWith(`skipped: ${group} suite`))).toMatch(
        /TEST_DATABASE_URL=postgres:\/\//,
      );
    expect(lines.find((l) => l.startsWith('skipped: browser suite'))).toMatch(
      /Chromium at \/usr\/bin\/chromium: apt-get install chromium, or set CHROMIUM_PATH/,
    );
    expect(lines.every((l) => !l.includes('\n'))).toBe(true);
  });

  it('says nothing when everything can run', () => {
    expect(skippedSuites({ env: { TEST_DATABASE_URL: 'postgres://x' }, ...none })).toEqual([]);
  });

  it('with PostgreSQL but no private cluster, names the restart test and the reason', () => {
    const lines = skippedSuites({
      env: { TEST_DATABASE_URL: 'postgres://x', CHROMIUM_PATH: '/opt/chrome' },
      chromiumExists: (p) => p === '/opt/chrome',
      privatePostgres: () => ({ reason: 'needs root or passwordless sudo' }),
    });
    expect(lines).toEqual([
      'skipped: PostgreSQL restart test (test/scale/faults.test.ts) starts a private cluster, which needs root or passwordless sudo',
    ]);
  });

  it('under CI the browser and restart tests are not announced: there they must run (and fail if they cannot)', () => {
    expect(
      skippedSuites({
        env: { CI: 'true', TEST_DATABASE_URL: 'postgres://x' },
        chromiumExists: () => false,
        privatePostgres: () => ({ reason: 'x' }),
      }),
    ).toEqual([]);
  });

  it('is printed for a whole run, not when files or names are picked', () => {
    const vitest = ['/usr/bin/node', '/repo/node_modules/vitest/vitest.mjs'];
    expect(runIsFiltered([...vitest, 'run'])).toBe(false);
    expect(runIsFiltered([...vitest, 'run', '--project', 'embedded'])).toBe(false);
    expect(runIsFiltered([...vitest, 'run', 'test/foundation/x.test.ts'])).toBe(true);
    expect(runIsFiltered([...vitest, 'run', '--project', 'embedded', 'test/x.test.ts'])).toBe(true);
    expect(runIsFiltered([...vitest, 'run', '-t', 'name'])).toBe(true);
  });

  it('names every suite that runs only on PostgreSQL (so a new one cannot be skipped in silence)', () => {
    const text = skippedSuites({ env: {}, ...none }).join('\n');
    const files = walk('test').filter((f) => /describe\.runIf\(isPostgres\)/.test(readFileSync(f, 'utf8')));
    expect(files.length).toBeGreaterThan(5);
    const unnamed = files.filter((f) => !text.includes(f) && !text.includes(dirname(f)));
    expect(unnamed).toEqual([]);
  });
});

function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, out);
    else if (name.endsWith('.test.ts')) out.push(path);
  }
  return out;
}
