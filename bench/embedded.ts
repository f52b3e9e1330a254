import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../test/support/process.ts';
import { type BenchRow, median, saveResults, stopWithBench } from './lib.ts';

// Start-up of the embedded database (no DATABASE_URL), as `npm start` runs it:
// - first start: `botpay serve` on an empty DATA_DIR until /readyz answers 200, as a ratio to a bare
//   PGlite initdb (a Node process that creates a PGlite data directory and exits) in the same run;
// - restart: the same data directory again, seconds until ready;
// - RSS of the service a second after it is ready.
// Goals: first start ≤ 0.8 × initdb, restart ≤ 1.5 s, RSS ≤ 300 MB. Each is measured RUNS times;
// the median counts.
const RUNS = Number(process.env.BENCH_EMBEDDED_RUNS ?? 3);

async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN);
  return kb / 1024;
}

/** A bare PGlite initdb in a fresh Node process: seconds from spawn to exit, and its RSS. */
async function bareInitdb(): Promise<{ seconds: number; rss: number }> {
  const dir = await mkdtemp(join(tmpdir(), 'botpay-initdb-'));
  const script = `const { PGlite } = await import('@electric-sql/pglite');
const db = await PGlite.create({ dataDir: ${JSON.stringify(join(dir, 'pg'))} });
await db.query('SELECT 1');
console.log(process.memoryUsage().rss);
await db.close();`;
  const started = performance.now();
  const child = stopWithBench(
    spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  let out = '';
  child.stdout.on('data', (chunk) => {
    out += chunk;
  });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  const seconds = (performance.now() - started) / 1000;
  await rm(dir, { recursive: true, force: true });
  if (code !== 0) throw new Error(`bare PGlite initdb exited with ${code}`);
  return { seconds, rss: Number(out.trim()) / 2 ** 20 };
}

/** `botpay serve` on dataDir: seconds from spawn until /readyz is 200, then its RSS a second later. */
async function serve(dataDir: string): Promise<{ seconds: number; rss: number; stop(): Promise<void> }> {
  const port = await freePort();
  const { BASE_URL: _vite, DATABASE_URL: _db, ...env } = process.env;
  const started = performance.now();
  const child: ChildProcess = stopWithBench(
    spawn(process.execPath, ['bin/botpay.mjs', 'serve'], {
      env: { ...env, DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'ignore', 'inherit'],
    }),
  );
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`botpay serve exited with ${child.exitCode}`);
    if (Date.now() > deadline) throw new Error('botpay serve did not become ready');
    try {
      if ((await fetch(`http://127.0.0.1:${port}/readyz`)).ok) break;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  const seconds = (performance.now() - started) / 1000;
  await new Promise((r) => setTimeout(r, 1000));
  if (child.pid === undefined) throw new Error('botpay serve has no process id');
  const rss = await rssMb(child.pid);
  return {
    seconds,
    rss,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    },
  };
}

const initdb: number[] = [];
const initdbRss: number[] = [];
const first: number[] = [];
const restart: number[] = [];
const rss: number[] = [];
for (let run = 0; run < RUNS; run++) {
  const bare = await bareInitdb();
  initdb.push(bare.seconds);
  initdbRss.push(bare.rss);
  const dataDir = await mkdtemp(join(tmpdir(), 'botpay-embedded-'));
  try {
    const a = await serve(dataDir);
    await a.stop();
    const b = await serve(dataDir);
    await b.stop();
    first.push(a.seconds);
    restart.push(b.seconds);
    rss.push(Math.max(a.rss, b.rss));
    console.log(
      `run ${run + 1}: bare initdb ${bare.seconds.toFixed(2)} s (${Math.round(bare.rss)} MB), first start ${a.seconds.toFixed(2)} s, restart ${b.seconds.toFixed(2)} s, RSS ${Math.round(a.rss)} / ${Math.round(b.rss)} MB`,
    );
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}

const initdbS = median(initdb);
const rows: BenchRow[] = [
  {
    benchmark: 'embedded',
    database: 'embedded',
    metric: `first start s (empty DATA_DIR to /readyz, median of ${RUNS})`,
    value: median(first),
    baseline: 'bare PGlite initdb s',
    baselineValue: initdbS,
    ratio: median(first) / initdbS,
    goal: '≤ 0.8',
  },
  {
    benchmark: 'embedded',
    database: 'embedded',
    metric: `restart s (to /readyz, median of ${RUNS})`,
    value: median(restart),
    baseline: 'bare PGlite initdb s',
    baselineValue: initdbS,
    ratio: median(restart) / initdbS,
    goal: '≤ 1.5 s',
  },
  {
    benchmark: 'embedded',
    database: 'embedded',
    metric: `RSS MB of the ready service (median of ${RUNS})`,
    value: median(rss),
    baseline: 'bare PGlite RSS MB',
    baselineValue: median(initdbRss),
    ratio: median(rss) / median(initdbRss),
    goal: '≤ 300 MB',
  },
];
await saveResults('embedded', rows);
