import pg from 'pg';
import { migrate } from '../src/platform/db/migrate.ts';
import { openPostgres } from '../src/platform/db/postgres.ts';
import { BENCH_DATABASE_URL, benchSchema, median, saveResults } from './lib.ts';

// npm run bench:rate-limit (PostgreSQL: BENCH_DATABASE_URL or TEST_DATABASE_URL)
//
// What one rate-limited request costs PostgreSQL (rate_limit_consume, run by every checkout, x402
// payment and registration), and whether that grows with the traffic (migration 0057). On one
// connection, each call a transaction of its own, with synchronous_commit off so that the WAL
// flush every commit waits for (the same for each statement) does not hide the function's CPU:
//   - baseline: a one-row UPDATE;
//   - exact: limit 30 (the default checkout limit), over 1,000 keys, each with up to 30 requests
//     in its window;
//   - buckets: limit 1,000,000 on one key, first with an empty window, then with
//     BENCH_RATE_LIMIT_FILL (30,000) requests in it (counted by the same function beforehand); the
//     fake clock moves a millisecond a call, so nearly every request falls in the minute of the
//     key's last one (the one-statement case of migration 0062), as under a busy bot's traffic.
// Phases alternate with the baseline for BENCH_ROUNDS rounds (3); medians are reported. Goal: the
// full window ≥ 0.8 × the empty one (before 0057, with 3,000 requests in it, about 0.1).

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const FILL = Number(process.env.BENCH_RATE_LIMIT_FILL ?? 30_000);
const HOUR = 3600;

const bench = await benchSchema();
const db = await openPostgres({ connectionString: BENCH_DATABASE_URL, schema: bench.schema, max: 2 });
const client = new pg.Client({ connectionString: bench.url });
try {
  await migrate(db);
  await db.query('CREATE TABLE bench_one (id integer PRIMARY KEY, n bigint NOT NULL)');
  await db.query('INSERT INTO bench_one VALUES (1, 0)');
  await client.connect();
  await client.query('SET synchronous_commit = off');

  // Fake time moving a millisecond per call, so a window's requests are spread as real ones are.
  let clock = Date.UTC(2026, 0, 5, 12, 0, 0);
  const consume = (key: string, limit: number) => {
    clock += 1;
    return client.query({
      name: 'consume',
      text: 'SELECT rate_limit_consume($1, $2, $3, $4) AS retry',
      values: [key, limit, HOUR, new Date(clock)],
    });
  };
  /** Calls per second of `call` over SECONDS, sequential. */
  const rate = async (call: (i: number) => Promise<unknown>) => {
    const end = performance.now() + SECONDS * 1000;
    let n = 0;
    const started = performance.now();
    while (performance.now() < end) await call(n++);
    return n / ((performance.now() - started) / 1000);
  };
  const update = () => client.query({ name: 'update', text: 'UPDATE bench_one SET n = n + 1 WHERE id = 1' });

  // The bucket key's window: empty in one key, FILL requests in the other.
  const fullKey = 'bench:full';
  for (let i = 0; i < FILL; i++) await consume(fullKey, 1_000_000);

  const baseline: number[] = [];
  const exact: number[] = [];
  const empty: number[] = [];
  const full: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    baseline.push(await rate(update));
    exact.push(await rate((i) => consume(`bench:exact:${round}:${i % 1000}`, 30)));
    const emptyKey = `bench:empty:${round}`;
    empty.push(await rate(() => consume(emptyKey, 1_000_000)));
    full.push(await rate(() => consume(fullKey, 1_000_000)));
  }
  const [requests] = await db.query<{ n: number }>(
    'SELECT (SELECT sum(c) FROM unnest(bucket_counts) c)::int AS n FROM rate_limits WHERE key = $1',
    [fullKey],
  );
  const b = median(baseline);
  const e = median(exact);
  const m = median(empty);
  const f = median(full);
  console.log(
    `baseline (one-row UPDATE): ${b.toFixed(0)}/s (rounds ${baseline.map((x) => x.toFixed(0)).join(', ')})`,
  );
  console.log(`limit 30, exact: ${e.toFixed(0)}/s (${(e / b).toFixed(2)} × baseline)`);
  console.log(`limit 1,000,000, empty window: ${m.toFixed(0)}/s (${(m / b).toFixed(2)} × baseline)`);
  console.log(
    `limit 1,000,000, ${requests?.n ?? '?'} requests in the window at the end: ${f.toFixed(0)}/s ` +
      `(${(f / b).toFixed(2)} × baseline, ${(f / m).toFixed(2)} × the empty window)`,
  );
  await saveResults('rateLimit', [
    {
      benchmark: 'rateLimit',
      database: 'postgres',
      metric: 'rate-limited requests/s, limit 30 (exact form)',
      value: e,
      baseline: 'one-row UPDATE/s',
      baselineValue: b,
      ratio: e / b,
      goal: '-',
    },
    {
      // Migration 0062: a request in the minute of the key's last counted one is one UPDATE (before
      // it, a locked read, a loop over the 61 slots and a rewrite). Four runs on 2026-12-04 read
      // 0.68 and 0.86 before, 0.76 and 0.71 after: this machine's noise is larger than the change.
      benchmark: 'rateLimit',
      database: 'postgres',
      metric: 'rate-limited requests/s, limit 1,000,000 (bucket form)',
      value: m,
      baseline: 'one-row UPDATE/s',
      baselineValue: b,
      ratio: m / b,
      goal: '-',
    },
    {
      benchmark: 'rateLimit',
      database: 'postgres',
      metric: `rate-limited requests/s, limit 1,000,000, ${FILL.toLocaleString('en')}+ requests in the window`,
      value: f,
      baseline: 'the same with an empty window',
      baselineValue: m,
      ratio: f / m,
      goal: '≥ 0.8',
    },
  ]);
} finally {
  await client.end().catch(() => {});
  await db.close();
  await bench.drop();
}
