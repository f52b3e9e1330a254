import pg from 'pg';
import { migrate } from '../src/platform/db/migrate.ts';
import { openPostgres } from '../src/platform/db/postgres.ts';
import { BENCH_DATABASE_URL, benchSchema, median, saveResults } from './lib.ts';

// npm run bench:webhook-backlog (PostgreSQL: BENCH_DATABASE_URL or TEST_DATABASE_URL)
//
// What a bot's backlog costs every other bot's deliveries (migration 0058). One bot sits at its
// bound (8 rows under lease) with BENCH_BACKLOG (50,000) due rows older than anyone else's, as a
// hanging receiver, or one slower than its bot's events, leaves it; 200 other bots have 20 due rows
// each. On one connection, the delivery worker's claim (webhook_claim: 256 rows looked at, 64 taken)
// runs again and again, its leases given back after each call so every call sees the same queue.
// Three states, alternated for BENCH_ROUNDS rounds (3), medians reported:
//   - none: the bot's backlog is not due (the claim never meets it): the baseline;
//   - walked: the backlog due and in the claim's way, as every claim met it before 0058;
//   - held: after the worker's park call (webhook_park), as the service runs now.
// Goal: held ≥ 0.8 × none (claims/s); walked shows what the park call saves.

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const BACKLOG = Number(process.env.BENCH_BACKLOG ?? 50_000);
const PER_BOT = 8;

const bench = await benchSchema();
const db = await openPostgres({ connectionString: BENCH_DATABASE_URL, schema: bench.schema, max: 2 });
const client = new pg.Client({ connectionString: bench.url });
try {
  await migrate(db);
  await db.query(
    `INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
                       webhook_secret_enc, callback_url, webhook_status, created_at)
     SELECT 'bot_b' || g, 'b-' || g, 'b@example.com', 'b@example.com', 'helper', md5('k' || g),
            'svc_live_', 'x', 'http://127.0.0.1:9/hook', 'active', now()
       FROM generate_series(0, 200) g`,
  );
  await db.query(
    `INSERT INTO events (id, bot_id, type, body, created_at)
     SELECT 'evt_b0x' || lpad(g::text, 9, '0'), 'bot_b0', 'wallet.funded', '{}',
            now() - interval '1 hour' + g * interval '1 microsecond'
       FROM generate_series(1, $1::int) g`,
    [BACKLOG],
  );
  await db.query(
    `INSERT INTO events (id, bot_id, type, body, created_at)
     SELECT 'evt_by' || lpad(g::text, 9, '0'), 'bot_b' || (g % 200 + 1), 'wallet.funded', '{}',
            now() - interval '1 minute' + g * interval '1 microsecond'
       FROM generate_series(1, 4000) g`,
  );
  await db.query('VACUUM ANALYZE');
  await client.connect();
  // The backlogged bot takes its slots (its rows are the oldest) and keeps them: a lease for a day.
  const slots = await client.query(
    `SELECT bot_id FROM webhook_claim(now(), now() + interval '1 day', 'hanging', $1, $1, '{}', 64)`,
    [PER_BOT],
  );
  if (slots.rows.some((r) => r.bot_id !== 'bot_b0'))
    throw new Error('the backlogged bot should hold its slots');

  let n = 0;
  const claim = async () => {
    const token = `t${n++}`;
    const r = await client.query({
      name: 'claim',
      text: `SELECT id FROM webhook_claim(now(), now() + interval '1 minute', $1, $2, 64, '{}', 256)`,
      values: [token, PER_BOT],
    });
    if (r.rows.length !== 64) throw new Error(`claimed ${r.rows.length}, not 64`);
    await client.query({
      name: 'give back',
      text: 'UPDATE webhook_queue SET lock_token = NULL, locked_until = NULL WHERE lock_token = $1',
      values: [token],
    });
  };
  /** Claims per second over SECONDS (each with its give-back; one connection). */
  const rate = async () => {
    for (let i = 0; i < 20; i++) await claim();
    const started = performance.now();
    const end = started + SECONDS * 1000;
    let calls = 0;
    while (performance.now() < end) {
      await claim();
      calls++;
    }
    return calls / ((performance.now() - started) / 1000);
  };
  const backlogDue = () =>
    client.query(
      `UPDATE webhook_queue SET due_at = coalesce(held_due_at, now() - interval '1 hour'), held_due_at = NULL
        WHERE bot_id = 'bot_b0' AND lock_token IS NULL`,
    );
  const backlogNotDue = () =>
    client.query(
      `UPDATE webhook_queue SET due_at = 'infinity', held_due_at = NULL WHERE bot_id = 'bot_b0' AND lock_token IS NULL`,
    );
  const settle = () => client.query('VACUUM webhook_queue');

  const none: number[] = [];
  const walked: number[] = [];
  const held: number[] = [];
  let heldRows = 0;
  for (let round = 0; round < ROUNDS; round++) {
    await backlogNotDue();
    await settle();
    none.push(await rate());
    await backlogDue();
    await settle();
    walked.push(await rate());
    const parked = await client.query('SELECT * FROM webhook_park(now(), $1, 100000)', [PER_BOT]);
    heldRows = parked.rows[0].held;
    await settle();
    held.push(await rate());
  }
  const b = median(none);
  const w = median(walked);
  const h = median(held);
  const list = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(', ');
  console.log(`claims/s, no backlog in the way: ${b.toFixed(0)} (rounds ${list(none)})`);
  console.log(
    `claims/s, ${BACKLOG.toLocaleString('en')} due rows of a bot at its bound in the way (before 0058): ` +
      `${w.toFixed(0)} (${(w / b).toFixed(2)} × none; rounds ${list(walked)})`,
  );
  console.log(
    `claims/s, the same backlog held by webhook_park (${heldRows} rows held): ${h.toFixed(0)} ` +
      `(${(h / b).toFixed(2)} × none; rounds ${list(held)})`,
  );
  await saveResults('webhookBacklog', [
    {
      benchmark: 'webhookBacklog',
      database: 'postgres',
      metric: `claims/s, ${BACKLOG.toLocaleString('en')} due rows of a bot at its bound walked past (before 0058)`,
      value: w,
      baseline: 'claims/s with no backlog',
      baselineValue: b,
      ratio: w / b,
      goal: '-',
    },
    {
      benchmark: 'webhookBacklog',
      database: 'postgres',
      metric: `claims/s, ${BACKLOG.toLocaleString('en')} due rows of a bot at its bound held back`,
      value: h,
      baseline: 'claims/s with no backlog',
      baselineValue: b,
      ratio: h / b,
      goal: '≥ 0.8',
    },
  ]);
} finally {
  await client.end().catch(() => {});
  await db.close();
  await bench.drop();
}
