import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { randomBase32 } from '../src/platform/ids.ts';
import { freePort } from '../test/support/process.ts';

// Shared pieces of the benchmarks: child processes for the system under test and its baseline
// (so the load generator never shares an event loop with the server), autocannon runs, and the
// results file that `npm run bench` turns into bench/RESULTS.md.

export const BENCH_DATABASE_URL =
  process.env.BENCH_DATABASE_URL ??
  process.env.TEST_DATABASE_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
export const DURATION_SECONDS = Number(process.env.BENCH_SECONDS ?? 10);

const children = new Set<ChildProcess>();
let stopsChildren = false;

/**
 * Registers a child process of the benchmark: when the benchmark ends, normally or by SIGINT or
 * SIGTERM (Ctrl-C, `timeout`, `pkill`), the child is stopped with it. A service left running would
 * take CPU from the next run and skew its figures.
 */
export function stopWithBench<T extends ChildProcess>(child: T): T {
  if (!stopsChildren) {
    stopsChildren = true;
    process.once('exit', () => {
      for (const c of children) c.kill('SIGTERM');
    });
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      process.once(signal, () => {
        for (const c of children) c.kill('SIGTERM');
        process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
      });
    }
  }
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

export interface Child {
  process: ChildProcess;
  url: string;
  stop(): Promise<void>;
}

/** Starts a TypeScript entry (or `botpay serve` when script is undefined) and waits for `readyPath`. */
export async function startChild(
  script: string | undefined,
  env: Record<string, string>,
  readyPath = '/healthz',
): Promise<Child> {
  const port = await freePort();
  // BENCH_CPU_PROF=<dir>: the service under test (not its baseline) writes a V8 CPU profile there
  // when it stops (node --cpu-prof; NODE_OPTIONS does not accept it).
  const profile =
    !script && process.env.BENCH_CPU_PROF
      ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`]
      : [];
  const args = script ? ['bin/run-ts.mjs', script] : [...profile, 'bin/botpay.mjs', 'serve'];
  const { BASE_URL: _vite, ...parentEnv } = process.env;
  const child = stopWithBench(
    spawn(process.execPath, args, {
      env: { ...parentEnv, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env },
      stdio: ['ignore', 'inherit', 'inherit'],
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${script ?? 'serve'} exited with ${child.exitCode}`);
    if (Date.now() > deadline) throw new Error(`${script ?? 'serve'} did not start`);
    try {
      if ((await fetch(url + readyPath)).ok) break;
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    process: child,
    url,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    },
  };
}

export interface LoadResult {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  non2xx: number;
}

export async function load(options: autocannon.Options): Promise<LoadResult> {
  // A short warm-up (JIT, pools) that is not counted.
  await autocannon({ ...options, duration: 2 });
  const { result, p50Ms, p99Ms } = await measure({ duration: DURATION_SECONDS, ...options });
  return {
    requestsPerSecond: result.requests.average,
    p50Ms,
    p99Ms,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
  };
}

/**
 * One autocannon run with exact latency percentiles. autocannon's own come from a histogram whose
 * smallest unit is 1 ms (a p99 of 1.9 ms reads 1), too coarse for a goal like "p99 ≤ 3 × the
 * baseline's" when the baseline's is about a millisecond. Every 2xx response's time (measured by
 * autocannon with hrtime, in fractional ms) is kept here instead.
 */
export async function measure(
  options: autocannon.Options,
): Promise<{ result: autocannon.Result; p50Ms: number; p99Ms: number }> {
  // The returned promise is also the run's event emitter (autocannon's typings only say the former).
  const run = autocannon(options) as Promise<autocannon.Result> & import('node:events').EventEmitter;
  const times: number[] = [];
  run.on('response', (_client: unknown, statusCode: number, _bytes: number, responseTime: number) => {
    if (statusCode >= 200 && statusCode < 300) times.push(responseTime);
  });
  const result = await run;
  const sorted = Float64Array.from(times).sort();
  return { result, p50Ms: percentileOf(sorted, 50), p99Ms: percentileOf(sorted, 99) };
}

/** The median of some values (the mean of the middle two for an even count); throws for none. */
export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  const at = (i: number): number => {
    const v = sorted[i];
    if (v === undefined) throw new Error('median of no values');
    return v;
  };
  return sorted.length % 2 ? at(mid) : (at(mid - 1) + at(mid)) / 2;
}

/** The p-th percentile of ascending values (nearest rank); NaN when there are none. */
export function percentileOf(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** CPU time (ms) of one /proc/<pid>/stat line: user + system, and system alone (clock ticks of 10 ms). */
function cpuOfStat(stat: string): { totalMs: number; sysMs: number } {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const user = Number(fields[11]);
  const sys = Number(fields[12]);
  return { totalMs: (user + sys) * 10, sysMs: sys * 10 };
}

/** CPU time (ms) a process has used so far, in all and in the kernel (Linux /proc; NaN elsewhere). */
export function cpuOf(pid: number | undefined): { totalMs: number; sysMs: number } {
  try {
    return cpuOfStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return { totalMs: Number.NaN, sysMs: Number.NaN };
  }
}

/** CPU time (user + system, ms) a process has used so far (Linux /proc; NaN elsewhere). */
export function cpuMsOf(pid: number | undefined): number {
  return cpuOf(pid).totalMs;
}

/**
 * CPU time (ms) used so far by every process of this name (Linux /proc; NaN elsewhere), e.g.
 * 'postgres': the server and all its backends (those of other work on the machine included).
 */
/**
 * The process name of PostgreSQL's server processes whose CPU the benches add up. Another name
 * (`BENCH_POSTGRES_PROCESS`) tells a private server apart from others on a shared machine: start it
 * through a symlink to the postgres binary with that name.
 */
export const POSTGRES_PROCESS = process.env.BENCH_POSTGRES_PROCESS ?? 'postgres';

export function cpuMsOfAll(name: string): number {
  try {
    let total = 0;
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      let stat: string;
      try {
        stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      } catch {
        continue; // exited meanwhile
      }
      if (stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) === name) total += cpuOfStat(stat).totalMs;
    }
    return total;
  } catch {
    return Number.NaN;
  }
}

/** A fresh PostgreSQL schema for one benchmark; returns its DATABASE_URL and a dropper. */
export async function benchSchema(): Promise<{ url: string; schema: string; drop(): Promise<void> }> {
  const schema = `bench_${randomBase32(10)}`;
  const admin = new pg.Client({ connectionString: BENCH_DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.end();
  const url = new URL(BENCH_DATABASE_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return {
    url: url.toString(),
    schema,
    async drop() {
      const c = new pg.Client({ connectionString: BENCH_DATABASE_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await c.end();
    },
  };
}

/**
 * Empties a bench schema's rate-limit windows before a load phase. Requests of the last phase may
 * still be finishing: a batch of their purchases (group commit, src/spend/batch.ts) locks several
 * bots' rows, which a DELETE of every row can meet in a deadlock. PostgreSQL then fails one side,
 * and this side tries again.
 */
export async function clearRateLimits(client: pg.Client, schema: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await client.query(`DELETE FROM ${schema}.rate_limits`);
      return;
    } catch (error) {
      if ((error as { code?: string }).code !== '40P01' || attempt >= 5) throw error;
    }
  }
}

export interface BenchRow {
  benchmark: string;
  database: 'postgres' | 'embedded' | '-';
  metric: string;
  value: number;
  baseline: string;
  baselineValue: number;
  ratio: number;
  goal: string;
  note?: string;
}

const RESULTS_DIR = join(process.cwd(), 'bench', 'results');

export async function saveResults(name: string, rows: BenchRow[]): Promise<void> {
  await mkdir(RESULTS_DIR, { recursive: true });
  await writeFile(
    join(RESULTS_DIR, `${name}.json`),
    `${JSON.stringify({ at: new Date().toISOString(), machine: machine(), rows }, null, 2)}\n`,
  );
  console.table(
    rows.map((r) => ({
      db: r.database,
      metric: r.metric,
      value: round(r.value),
      baseline: `${r.baseline} = ${round(r.baselineValue)}`,
      ratio: round(r.ratio, 3),
      goal: r.goal,
      met: metLabel(goalMet(r)),
    })),
  );
}

export async function readResults(
  name: string,
): Promise<{ at: string; machine: string; rows: BenchRow[] } | undefined> {
  try {
    return JSON.parse(await readFile(join(RESULTS_DIR, `${name}.json`), 'utf8'));
  } catch {
    return undefined;
  }
}

export function machine(): string {
  return `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
}

export function round(n: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

/**
 * Whether a row meets its goal, read from the goal text: `≥ 0.5` or `≤ 3` compare the ratio; a unit
 * (`p99 ≤ 100 ms`, `≤ 1.5 s`, `≤ 300 MB`) compares the value in that unit. undefined: the row has
 * no checkable goal ('-', prose).
 */
export function goalMet(row: Pick<BenchRow, 'goal' | 'value' | 'ratio'>): boolean | undefined {
  const m = /(≥|≤|>=|<=)\s*(\d+(?:\.\d+)?)\s*(ms|s|MB|×)?\s*$/.exec(row.goal.trim());
  if (!m) return undefined;
  const limit = Number(m[2]);
  const unit = m[3];
  const actual = unit === undefined || unit === '×' ? row.ratio : row.value;
  if (!Number.isFinite(actual)) return false;
  return m[1] === '≥' || m[1] === '>=' ? actual >= limit : actual <= limit;
}

export function metLabel(met: boolean | undefined): string {
  return met === undefined ? '-' : met ? 'yes' : 'NO';
}

/** Logical CPUs of this machine: every process of a benchmark (service, database, load) shares them. */
export const CORES = cpus().length;

/**
 * The CPU a rate leaves per operation, in µs summed over every process that works on it: with
 * every core busy all the time, `rate` operations per second can use at most CORES × 10⁶ ÷ rate.
 * A goal's rate (goal ratio × the baseline's rate measured in the same run) thus bounds the CPU
 * per operation from above: a path that needs more cannot reach the goal on this machine, however
 * well its work overlaps, and only doing less work per operation can.
 */
export function cpuBudgetUs(rate: number): number {
  return (CORES * 1e6) / rate;
}

/** How much of the machine (percent of all cores) `rate` operations/s at `usPerOp` µs of CPU each keep busy. */
export function coresBusyPercent(rate: number, usPerOp: number): number {
  return (100 * rate * usPerOp) / (CORES * 1e6);
}

/**
 * A row comparing the CPU one operation takes (µs, summed over the processes named in `metric`)
 * with the budget a throughput goal leaves (`cpuBudgetUs`). Informational (its goal column is not
 * checked): a ratio above 1 shows the goal out of reach at this CPU cost.
 */
export function cpuBudgetRow(
  row: Pick<BenchRow, 'benchmark' | 'database' | 'metric'>,
  usedUs: number,
  goalRatio: number,
  baselineRate: number,
): BenchRow {
  return {
    ...row,
    value: usedUs,
    baseline: `CPU µs the goal leaves (${CORES} cores ÷ (${goalRatio} × ${Math.round(baselineRate)}/s))`,
    baselineValue: cpuBudgetUs(goalRatio * baselineRate),
    ratio: usedUs / cpuBudgetUs(goalRatio * baselineRate),
    goal: '(above 1: out of reach at this cost)',
  };
}

/**
 * BENCH_PERF=1: where the CPU of some processes goes, by `perf record` (Linux perf, software clock
 * events, call graphs) over `seconds`. Returns the inclusive share (0..1) of their samples in each
 * named function, or undefined when perf is missing or not allowed. PostgreSQL's Debian build is
 * stripped but keeps its exported symbols, which name every stage used here.
 */
export async function perfShares(
  pids: number[],
  seconds: number,
  symbols: readonly string[],
): Promise<Map<string, number> | undefined> {
  // BENCH_PERF_DATA=<file>: keep the recording there, for `perf report -i <file>`.
  const kept = process.env.BENCH_PERF_DATA;
  const file = kept ?? join(tmpdir(), `bench-perf-${process.pid}-${Date.now()}.data`);
  const run = (args: string[]) =>
    new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn('perf', args, { stdio: ['ignore', 'pipe', 'ignore'] });
      let out = '';
      child.stdout.on('data', (d) => {
        out += String(d);
      });
      child.once('error', () => resolve({ code: 1, out: '' }));
      child.once('exit', (code) => resolve({ code, out }));
    });
  try {
    const recorded = await run([
      'record',
      '-q',
      '-e',
      'cpu-clock',
      '-F',
      '999',
      '-g',
      '-p',
      pids.join(','),
      '-o',
      file,
      '--',
      'sleep',
      String(seconds),
    ]);
    if (recorded.code !== 0) return undefined;
    const report = await run(['report', '-i', file, '--children', '--sort', 'sym', '--stdio', '-g', 'none']);
    if (report.code !== 0) return undefined;
    const wanted = new Set(symbols);
    const shares = new Map<string, number>();
    for (const line of report.out.split('\n')) {
      const m = /^\s*([\d.]+)%\s+[\d.]+%\s+\[[.k]\]\s+(\S+)/.exec(line);
      if (m?.[2] && wanted.has(m[2]) && !shares.has(m[2])) shares.set(m[2], Number(m[1]) / 100);
    }
    return shares;
  } finally {
    if (!kept) await rm(file, { force: true });
  }
}
