import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { createOwnerToken, findOrCreateOwner } from '../src/owners/auth.ts';
import { migrate } from '../src/platform/db/migrate.ts';
import { openPostgres } from '../src/platform/db/postgres.ts';
import { randomBase32 } from '../src/platform/ids.ts';
import { freePort } from '../test/support/process.ts';
import {
  clearRateLimits,
  cpuBudgetRow,
  cpuBudgetUs,
  cpuMsOf,
  cpuMsOfAll,
  measure,
  median,
  perfShares,
  stopWithBench,
} from './lib.ts';
import { type CheckoutBot, call, openOwnerGuardrails, seedCheckoutBot } from './seed.ts';

// npm run bench:checkout
//
// 1. Approved checkouts per second on PostgreSQL at 32 connections across many bots, as a ratio to
//    a minimal durable transaction (one row update + one insert, same HTTP stack, auth hook and
//    pool) measured in the same run. Goal ≥ 0.5.
// 2. p50 checkout latency with 1,000,000 past ledger entries ÷ p50 with none. Goal ≤ 1.2.
// 3. Deterministic, whatever the load: row and index writes per approved checkout and per minimal
//    transaction, from pg_stat_user_tables (n_tup_ins/upd/del) over WRITES_SAMPLE sequential calls.
//    Index writes: each insert and each non-HOT update writes one entry in every index of its table.
//
// BENCH_PROFILE_DIR=/tmp/prof also writes a V8 CPU profile of the service's process (wall-clock
// samples: a loopback socket write that wakes PostgreSQL shows long when the writer is preempted);
// BENCH_PERF_MAP=1 starts it with --perf-basic-prof, so that `perf record -e cpu-clock -p <pid>`
// names its JavaScript frames (CPU time only).
//
// The service runs in a child process (bench/baseline/checkoutServer.ts) so that autocannon does
// not share its event loop.

const DATABASE_URL =
  process.env.BENCH_DATABASE_URL ??
  process.env.TEST_DATABASE_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
// Phases alternate and medians are reported: the machine may be shared, and neighbours' load
// comes and goes.
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = 32;
const OWNERS = Number(process.env.BENCH_OWNERS ?? 16);
const BOTS_PER_OWNER = Number(process.env.BENCH_BOTS_PER_OWNER ?? 4);
const HISTORY_ENTRIES = Number(process.env.BENCH_HISTORY_ENTRIES ?? 1_000_000);
const WRITES_SAMPLE = Number(process.env.BENCH_WRITES_SAMPLE ?? 100);
const SECRET_KEY = 'bench-secret-key-0123456789abcdef0123456789abcdef';

async function startServer(env: Record<string, string>): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const { BASE_URL: _ignored, ...parentEnv } = process.env;
  const profile = process.env.BENCH_PROFILE_DIR
    ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`]
    : [];
  if (process.env.BENCH_PERF_MAP === '1') profile.push('--perf-basic-prof');
  const child = stopWithBench(
    spawn(process.execPath, [...profile, 'bin/run-ts.mjs', 'bench/baseline/checkoutServer.ts'], {
      env: { ...parentEnv, ...env, PORT: String(port), LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'inherit', 'inherit'],
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`bench server exited with ${child.exitCode}`);
    if (Date.now() > deadline) throw new Error('bench server did not start');
    try {
      if ((await fetch(`${url}/readyz`)).ok) return { url, child };
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

interface Load {
  okPerSecond: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  /** CPU µs per request of the service's process and of PostgreSQL's processes. */
  serverUs: number;
  postgresUs: number;
  /** CPU µs per request of the service's own PostgreSQL backends only (other work on the machine excluded). */
  backendsUs: number;
  /** CPU µs per request of this process: the load generator (autocannon). */
  benchUs: number;
}

async function warmUp(options: autocannon.Options): Promise<void> {
  await autocannon({ ...options, duration: 2 }); // JIT, pools, caches: not counted
}

/** The service's process (set once it runs): its CPU per request is reported apart from PostgreSQL's. */
let serverPid: number | undefined;

/** The service's PostgreSQL backends (its pool and LISTEN connection), by application_name. */
async function serviceBackends(): Promise<number[]> {
  const r = await admin.query('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [appName]);
  return r.rows.map((row: { pid: number }) => row.pid);
}

async function load(options: autocannon.Options): Promise<Load> {
  const server0 = cpuMsOf(serverPid);
  const postgres0 = cpuMsOfAll('postgres');
  const backends0 = new Map((await serviceBackends()).map((pid) => [pid, cpuMsOf(pid)]));
  const bench0 = process.cpuUsage();
  const { result: r, p50Ms, p99Ms } = await measure({ ...options, duration: SECONDS });
  const bench = process.cpuUsage(bench0);
  const requests = Math.max(1, r.requests.total);
  const serverUs = ((cpuMsOf(serverPid) - server0) * 1000) / requests;
  // Every PostgreSQL process (backends that other work on the machine uses included).
  const postgresUs = ((cpuMsOfAll('postgres') - postgres0) * 1000) / requests;
  // A backend that exited during the phase is not counted; one that started is counted whole.
  let backendsMs = 0;
  for (const pid of await serviceBackends()) {
    const now = cpuMsOf(pid);
    if (Number.isFinite(now)) backendsMs += now - (backends0.get(pid) ?? 0);
  }
  const backendsUs = (backendsMs * 1000) / requests;
  return {
    okPerSecond: r['2xx'] / SECONDS,
    p50: p50Ms,
    p99: p99Ms,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    serverUs,
    postgresUs,
    backendsUs,
    benchUs: (bench.user + bench.system) / requests,
  };
}

interface TableWrites {
  table: string;
  ins: number;
  upd: number;
  hot: number;
  del: number;
  indexes: number;
  /** Entries of all its indexes: rows matching each index's predicate (partial indexes included). */
  entries: number;
}

async function tableWrites(client: pg.Client, schemaName: string): Promise<Map<string, TableWrites>> {
  const r = await client.query(
    `SELECT t.relname AS table, t.n_tup_ins::int AS ins, t.n_tup_upd::int AS upd, t.n_tup_hot_upd::int AS hot,
            t.n_tup_del::int AS del,
            (SELECT array_agg(coalesce(pg_get_expr(i.indpred, i.indrelid), 'true')) FROM pg_index i
              WHERE i.indrelid = t.relid) AS preds
       FROM pg_stat_user_tables t WHERE t.schemaname = $1`,
    [schemaName],
  );
  const out = new Map<string, TableWrites>();
  for (const row of r.rows as Array<Omit<TableWrites, 'indexes' | 'entries'> & { preds: string[] | null }>) {
    const preds = row.preds ?? [];
    let entries = 0;
    if (preds.length > 0) {
      const counts = await client.query(
        `SELECT ${preds.map((p, i) => `count(*) FILTER (WHERE ${p})::int AS c${i}`).join(', ')}
           FROM ${schemaName}."${row.table}"`,
      );
      entries = Object.values(counts.rows[0] as Record<string, number>).reduce((x, y) => x + y, 0);
    }
    out.set(row.table, { ...row, indexes: preds.length, entries });
  }
  return out;
}

/**
 * Row and index writes per call of `run` (n calls, one at a time). Rows: n_tup_ins + n_tup_upd +
 * n_tup_del. Index entries: the growth of every index (rows matching its predicate) plus one entry
 * in each index per non-HOT update. Backends send their table statistics when idle, at most every
 * 10 s (PostgreSQL 15), hence the wait before reading.
 */
async function writesPerCall(
  client: pg.Client,
  schemaName: string,
  n: number,
  run: (i: number) => Promise<void>,
): Promise<{ rows: number; indexes: number; perTable: Record<string, string> }> {
  const settle = () => new Promise((r) => setTimeout(r, 11_000));
  await settle();
  const before = await tableWrites(client, schemaName);
  for (let i = 0; i < n; i++) await run(i);
  await settle();
  const after = await tableWrites(client, schemaName);
  let rows = 0;
  let indexes = 0;
  const perTable: Record<string, string> = {};
  for (const [name, a] of after) {
    const b = before.get(name) ?? { ins: 0, upd: 0, hot: 0, del: 0, entries: 0 };
    const ins = a.ins - b.ins;
    const upd = a.upd - b.upd;
    const del = a.del - b.del;
    const coldUpd = upd - (a.hot - b.hot);
    if (ins + upd + del === 0) continue;
    const entries = Math.max(0, a.entries - b.entries) + coldUpd * a.indexes;
    rows += ins + upd + del;
    indexes += entries;
    perTable[name] =
      `ins ${(ins / n).toFixed(2)} upd ${(upd / n).toFixed(2)} (non-HOT ${(coldUpd / n).toFixed(2)}) ` +
      `del ${(del / n).toFixed(2)}; index entries ${(entries / n).toFixed(2)} (${a.indexes} indexes)`;
  }
  return { rows: rows / n, indexes: indexes / n, perTable };
}

/** Ends the run early (BENCH_HISTORY_ENTRIES=0: throughput only). */
class Stop extends Error {}

const schema = `bench_${randomBase32(10)}`;
const admin = new pg.Client({ connectionString: DATABASE_URL });
await admin.connect();
await admin.query(`CREATE SCHEMA ${schema}`);
const schemaUrl = new URL(DATABASE_URL);
// The service's backends are found by this name (their CPU apart from other work on the machine).
const appName = `botpay-bench-${schema}`;
schemaUrl.searchParams.set('application_name', appName);
// BENCH_TRACK_FUNCTIONS=1: the service's sessions count time per SQL function (track_functions, a
// superuser setting), printed at the end from pg_stat_user_functions: where the checkout's time
// in PostgreSQL goes, function by function (self time excludes the functions it calls).
const trackFunctions = process.env.BENCH_TRACK_FUNCTIONS === '1';
schemaUrl.searchParams.set(
  'options',
  `-c search_path=${schema}${trackFunctions ? ' -c track_functions=all' : ''}`,
);
const db = await openPostgres({ connectionString: DATABASE_URL, schema, max: 4 });
let server: { url: string; child: ChildProcess } | undefined;
try {
  await migrate(db);
  server = await startServer({
    DATABASE_URL: schemaUrl.toString(),
    SECRET_KEY,
    REGISTRATION_RATE_LIMIT_PER_HOUR: '1000000',
    CHECKOUT_RATE_LIMIT_PER_HOUR: '1000000',
    ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
    ROLES: 'api',
  });
  const base = server.url;
  serverPid = server.child.pid;

  // Seed: OWNERS owners with BOTS_PER_OWNER bots each; one auto-approving card per bot.
  console.log(`seeding ${OWNERS * BOTS_PER_OWNER} bots…`);
  const bots: CheckoutBot[] = [];
  for (let o = 0; o < OWNERS; o++) {
    const email = `bench-${o}@example.com`;
    const token = await db.transaction(async (tx) => {
      const owner = await findOrCreateOwner(tx, email, Date.now());
      return createOwnerToken(tx, owner.id, Date.now());
    });
    const ownerAuth = { authorization: `Bearer ${token}` };
    await openOwnerGuardrails(base, ownerAuth);
    for (let b = 0; b < BOTS_PER_OWNER; b++) {
      bots.push(
        await seedCheckoutBot(base, ownerAuth, {
          name: `bench-${o}-${b}`,
          ownerEmail: email,
          approvalMode: process.env.BENCH_HOLD ? 'ask_for_everything' : 'auto_approve_under_threshold',
        }),
      );
    }
  }
  await db.query('INSERT INTO bench_rows (bot_id) SELECT id FROM bots');
  // BENCH_ANALYZE=1: statistics taken now, while the tables are small, as in a young database after
  // its first analyse; the plans the service's connections then make and keep describe small tables
  // that the load phases grow many times over (src/platform/db/migrate.ts, "Index plans").
  if (process.env.BENCH_ANALYZE === '1') await db.query('ANALYZE');

  /** The i-th bot, round the list (never empty: OWNERS × BOTS_PER_OWNER were seeded). */
  const nth = (list: typeof bots, i: number) => {
    const bot = list[i % list.length];
    if (!bot) throw new Error('no bots seeded');
    return bot;
  };
  const pick = (() => {
    let i = 0;
    return () => nth(bots, i++);
  })();
  const minimalOptions: autocannon.Options = {
    url: base,
    connections: CONNECTIONS,
    requests: [
      {
        method: 'POST',
        path: '/api/v1/bot/bench/minimal',
        setupRequest: (req) => ({ ...req, headers: { ...req.headers, authorization: pick().auth } }),
      },
    ],
  };

  // The bench runs far above the real 30/hour limit (CHECKOUT_RATE_LIMIT_PER_HOUR is raised), so
  // each bot's sliding window would hold hundreds of hits and the limiter's count would grow from
  // phase to phase. Each phase starts with the window empty, as it is for a bot under the limit.
  const checkoutOptions: autocannon.Options = {
    url: base,
    connections: CONNECTIONS,
    requests: [
      {
        method: 'POST',
        path: '/api/v1/bot/merchant/checkout',
        setupRequest: (req) => {
          const bot = pick();
          return {
            ...req,
            headers: { ...req.headers, authorization: bot.auth, 'content-type': 'application/json' },
            body: JSON.stringify({
              profile_index: bot.profile,
              merchant_name: 'Bench Store',
              merchant_url: 'https://bench.example/item',
              item_name: 'Widget',
              amount_cents: 100,
              category: 'retail',
            }),
          };
        },
      },
    ],
  };
  const checkoutLoad = async (label: string) => {
    await clearRateLimits(admin, schema);
    const r = await load(checkoutOptions);
    console.log(
      `checkout (${label}): ${r.okPerSecond.toFixed(0)} approved/s, p50 ${r.p50.toFixed(1)} ms, non-2xx ${r.non2xx}, errors ${r.errors}; ` +
        `CPU per request: service ${r.serverUs.toFixed(0)} µs, PostgreSQL ${r.postgresUs.toFixed(0)} µs ` +
        `(the service’s backends ${r.backendsUs.toFixed(0)} µs)`,
    );
    return r;
  };
  /**
   * BENCH_PERF=1: one more checkout phase, not counted, with perf recording the service's
   * PostgreSQL backends (perfShares): the share of their CPU in each stage of a checkout, and what
   * that is per checkout.
   */
  const profileBackends = async () => {
    const stages: Array<[string, string]> = [
      ['plpgsql_call_handler', 'PL/pgSQL: spend_run, its statements and the trigger functions'],
      ['standard_ExecutorStart', 'executor start-up, once per statement (the call’s, triggers’, FK checks’)'],
      ['AfterTriggerEndQuery', 'after-row triggers at the end of each statement'],
      ['SPI_execute_snapshot', 'of which foreign-key checks'],
      ['ExecInsertIndexTuples', 'index entries'],
      ['CommitTransactionCommand', 'commit (deferred ledger balance checks, WAL flush)'],
      ['XLogFlush', 'of which WAL flush'],
      ['EmitErrorReport', 'NOTICEs to the client (change announcements)'],
      ['__x64_sys_sendto', 'sending answers (kernel)'],
    ];
    await clearRateLimits(admin, schema);
    const [r, shares] = await Promise.all([
      load(checkoutOptions),
      new Promise<void>((resolve) => setTimeout(resolve, 500)).then(async () =>
        perfShares(
          await serviceBackends(),
          Math.max(1, SECONDS - 1),
          stages.map(([symbol]) => symbol),
        ),
      ),
    ]);
    if (!shares) {
      console.log('BENCH_PERF: perf record failed (is Linux perf installed, and allowed to sample?)');
      return;
    }
    console.log(
      `where the service’s PostgreSQL backends spend their CPU in a checkout (perf, ${r.okPerSecond.toFixed(0)} approved/s, ` +
        `${r.backendsUs.toFixed(0)} µs per checkout; shares are inclusive, so they overlap):`,
    );
    console.table(
      stages.map(([symbol, stage]) => ({
        stage,
        share: `${(100 * (shares.get(symbol) ?? 0)).toFixed(1)} %`,
        'µs per checkout': Math.round((shares.get(symbol) ?? 0) * r.backendsUs),
      })),
    );
  };

  // 3. Writes per operation (deterministic; before the load phases, so nothing else writes).
  // Steady state: each bot's counters and rate-limit row exist before the sample (a bot's first
  // purchase of a day or month creates its counter rows).
  const writeBots = bots.slice(0, Math.min(bots.length, 8));
  const buy = async (i: number, headers: Record<string, string> = {}) => {
    const bot = nth(writeBots, i);
    await call(
      `${base}/api/v1/bot/merchant/checkout`,
      'POST',
      { authorization: bot.auth, ...headers },
      {
        profile_index: bot.profile,
        merchant_name: 'Bench Store',
        merchant_url: 'https://bench.example/item',
        item_name: 'Widget',
        amount_cents: 100,
        category: 'retail',
      },
    );
  };
  for (let i = 0; i < writeBots.length; i++) await buy(i);
  const checkoutWrites = await writesPerCall(admin, schema, WRITES_SAMPLE, (i) => buy(i));
  // Bots are told to send an Idempotency-Key with every checkout (docs/api.md): a new key each.
  const keyedWrites = await writesPerCall(admin, schema, WRITES_SAMPLE, (i) =>
    buy(i, { 'idempotency-key': `bench-${randomBase32(8)}-${i}` }),
  );
  const minimalWrites = await writesPerCall(admin, schema, WRITES_SAMPLE, async (i) => {
    await call(`${base}/api/v1/bot/bench/minimal`, 'POST', { authorization: nth(writeBots, i).auth });
  });
  console.log('writes per approved checkout, by table:');
  console.table(checkoutWrites.perTable);
  console.log(
    `writes per approved checkout: ${checkoutWrites.rows.toFixed(2)} rows + ${checkoutWrites.indexes.toFixed(2)} index entries; ` +
      `minimal durable transaction: ${minimalWrites.rows.toFixed(2)} rows + ${minimalWrites.indexes.toFixed(2)} index entries`,
  );
  console.log('writes per approved checkout with an Idempotency-Key, by table:');
  console.table(keyedWrites.perTable);
  console.log(
    `writes per approved checkout with an Idempotency-Key: ${keyedWrites.rows.toFixed(2)} rows + ${keyedWrites.indexes.toFixed(2)} index entries`,
  );

  await warmUp(minimalOptions);
  await warmUp(checkoutOptions);
  const minimalRuns: Load[] = [];
  const emptyRuns: Load[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const m = await load(minimalOptions);
    console.log(
      `minimal durable transaction: ${m.okPerSecond.toFixed(0)}/s, p50 ${m.p50.toFixed(1)} ms; ` +
        `CPU per request: service ${m.serverUs.toFixed(0)} µs, PostgreSQL ${m.postgresUs.toFixed(0)} µs ` +
        `(the service’s backends ${m.backendsUs.toFixed(0)} µs)`,
    );
    minimalRuns.push(m);
    emptyRuns.push(await checkoutLoad('no history'));
  }
  // CPU per request of every process on the machine that works on it: the service, PostgreSQL and
  // the load generator. Both phases keep both cores busy, so the throughput ratio follows the ratio
  // of these sums, and the goal's rate bounds the checkout's sum (cpuBudgetRow).
  const allUs = (r: Load) => r.serverUs + r.postgresUs + r.benchUs;
  const minimal = {
    okPerSecond: median(minimalRuns.map((r) => r.okPerSecond)),
    cpuUs: median(minimalRuns.map(allUs)),
  };
  const empty = {
    okPerSecond: median(emptyRuns.map((r) => r.okPerSecond)),
    p50: median(emptyRuns.map((r) => r.p50)),
    cpuUs: median(emptyRuns.map(allUs)),
    postgresUs: median(emptyRuns.map((r) => r.postgresUs)),
  };
  const budgetRows = [
    cpuBudgetRow(
      {
        benchmark: 'checkout',
        database: 'postgres',
        metric: `CPU µs per approved checkout: service + PostgreSQL + load generator (median of ${ROUNDS})`,
      },
      empty.cpuUs,
      0.5,
      minimal.okPerSecond,
    ),
    cpuBudgetRow(
      {
        benchmark: 'checkout',
        database: 'postgres',
        metric: `CPU µs per approved checkout in PostgreSQL alone (median of ${ROUNDS})`,
      },
      empty.postgresUs,
      0.5,
      minimal.okPerSecond,
    ),
  ];
  console.log(
    `CPU per request, service + PostgreSQL + load generator (medians): minimal transaction ${minimal.cpuUs.toFixed(0)} µs, ` +
      `checkout ${empty.cpuUs.toFixed(0)} µs, of which PostgreSQL ${empty.postgresUs.toFixed(0)} µs; ` +
      `0.5 × ${minimal.okPerSecond.toFixed(0)}/s leaves ${cpuBudgetUs(0.5 * minimal.okPerSecond).toFixed(0)} µs per checkout`,
  );
  if (process.env.BENCH_PERF === '1') await profileBackends();

  // 1,000,000 past ledger entries (and a confirmation per purchase), bulk-inserted. Triggers are
  // skipped for the load (session_replication_role = replica): each pair of rows balances, and the
  // funding/purchase pairs net to zero per bot, so the wallet projections stay right.
  if (HISTORY_ENTRIES === 0) throw new Stop();
  console.log(`inserting ${HISTORY_ENTRIES} past ledger entries…`);
  const started = Date.now();
  const txCount = Math.floor(HISTORY_ENTRIES / 2);
  await admin.query(`SET search_path = ${schema}`);
  await admin.query('BEGIN');
  await admin.query('SET LOCAL session_replication_role = replica');
  await admin.query(
    `CREATE TEMP TABLE hist_bots AS SELECT row_number() OVER (ORDER BY id) - 1 AS n, id FROM bots WHERE owner_id IS NOT NULL`,
  );
  await admin.query(
    `INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at)
     SELECT 'ltx_hist' || g, b.id, CASE WHEN g % 2 = 0 THEN 'funding' ELSE 'purchase' END, 'hist' || g, 'history',
            now() - interval '400 days' + g * interval '1 second'
       FROM generate_series(1, $1::int) g JOIN hist_bots b ON b.n = g % (SELECT count(*) FROM hist_bots)`,
    [txCount],
  );
  await admin.query(
    `INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_micros, created_at)
     SELECT t.id, t.bot_id, a.account, a.sign * 1000000, t.created_at
       FROM ledger_transactions t
       CROSS JOIN LATERAL (VALUES
         (CASE WHEN t.kind = 'funding' THEN 'owner_funding' ELSE 'wallet_available' END, -1),
         (CASE WHEN t.kind = 'funding' THEN 'wallet_available' ELSE 'merchant_settlement' END, 1)) AS a(account, sign)
      WHERE t.description = 'history'`,
  );
  await admin.query(
    `INSERT INTO checkout_confirmations (id, bot_id, owner_id, card_id, profile_index, is_real, profile_window,
       merchant_name, merchant_url, item_name, amount_micros, status, created_at, decided_at, decided_by)
     SELECT t.reference, t.bot_id, b.owner_id, c.id, c.real_profile_index, true, 'month', 'Old Store',
            'https://old.example', 'Old item', 1000000, 'approved', t.created_at, t.created_at, 'guardrails'
       FROM ledger_transactions t JOIN bots b ON b.id = t.bot_id JOIN cards c ON c.bot_id = t.bot_id
      WHERE t.description = 'history' AND t.kind = 'purchase'`,
  );
  await admin.query('COMMIT');
  // VACUUM now, so autovacuum of the new rows does not run during the measurement.
  await admin.query('VACUUM ANALYZE');
  const entries = await admin.query('SELECT count(*)::int AS n FROM ledger_entries');
  console.log(
    `history: ${entries.rows[0].n} ledger entries in total (${((Date.now() - started) / 1000).toFixed(0)} s)`,
  );

  await warmUp(checkoutOptions);
  const fullRuns: Load[] = [];
  for (let round = 0; round < ROUNDS; round++) fullRuns.push(await checkoutLoad('1M history'));
  const full = { p50: median(fullRuns.map((r) => r.p50)) };

  const throughputRatio = empty.okPerSecond / minimal.okPerSecond;
  const latencyRatio = full.p50 / Math.max(empty.p50, 0.001);
  const rows = [
    {
      benchmark: 'checkout',
      database: 'postgres',
      metric: `row + index writes per approved checkout (${WRITES_SAMPLE} sequential, pg_stat_user_tables)`,
      value: checkoutWrites.rows + checkoutWrites.indexes,
      baseline: 'row + index writes per minimal durable transaction',
      baselineValue: minimalWrites.rows + minimalWrites.indexes,
      ratio: (checkoutWrites.rows + checkoutWrites.indexes) / (minimalWrites.rows + minimalWrites.indexes),
      goal: 'lower is better',
    },
    {
      benchmark: 'checkout',
      database: 'postgres',
      metric: `approved checkouts/s (${CONNECTIONS} conn, ${bots.length} bots, median of ${ROUNDS})`,
      value: empty.okPerSecond,
      baseline: 'minimal durable transaction/s',
      baselineValue: minimal.okPerSecond,
      ratio: throughputRatio,
      goal: '≥ 0.5',
    },
    {
      benchmark: 'checkout',
      database: 'postgres',
      metric: `checkout p50 ms with 1M ledger entries (median of ${ROUNDS})`,
      value: full.p50,
      baseline: 'checkout p50 ms with none',
      baselineValue: empty.p50,
      ratio: latencyRatio,
      goal: '≤ 1.2',
    },
    ...budgetRows,
  ];
  console.table(
    rows.map((r) => ({
      metric: r.metric,
      value: r.value.toFixed(1),
      baseline: `${r.baseline} = ${r.baselineValue.toFixed(1)}`,
      ratio: r.ratio.toFixed(3),
      goal: r.goal,
    })),
  );
  const dir = join(process.cwd(), 'bench', 'results');
  await mkdir(dir, { recursive: true });
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
  await writeFile(
    join(dir, 'checkout.json'),
    `${JSON.stringify({ at: new Date().toISOString(), machine, rows }, null, 2)}\n`,
  );
} catch (error) {
  if (!(error instanceof Stop)) throw error;
} finally {
  if (trackFunctions) {
    await new Promise((r) => setTimeout(r, 11_000)); // statistics reach the shared counters when idle
    const f = await admin.query(
      `SELECT funcname, calls::int, round(total_time::numeric / calls, 3)::float AS total_ms,
              round(self_time::numeric / calls, 3)::float AS self_ms
         FROM pg_stat_user_functions WHERE schemaname = $1 ORDER BY total_time DESC`,
      [schema],
    );
    console.log('time per call in PostgreSQL functions (ms):');
    console.table(f.rows);
  }
  if (server && server.child.exitCode === null) {
    const child = server.child;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
  await db.close();
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {});
  await admin.end();
}
