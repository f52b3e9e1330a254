import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, isPostgres, POSTGRES_URL, type TestDatabase } from '../support/db.ts';
import { nestedPlans } from '../support/plans.ts';

// The delivery worker's claim (src/migrations/functions/webhook_claim.sql) runs with a generic plan,
// made once per connection from the statistics of the moment. Once a database has statistics (any
// database autovacuum has analysed), the join of the ranked due rows with the queue was planned as
// a nested loop comparing every due row with every ranked row: for a claim of 128 rows out of 512
// candidates about 37,000 comparisons, half the claim's time, in the one call the worker makes at a
// time. The claim reads the ranked rows by primary key (`= ANY` of their ids) instead.
// This test looks at the plan PostgreSQL really uses inside the function (auto_explain, nested
// statements) after ANALYZE, with rows under lease at the head of the queue as in a busy worker.
// The claim works on webhook_queue (0046): the bots already at their bound anywhere (left out of
// the candidates, issue 32) are counted from the leased rows' partial index, the window of due rows
// comes from the unleased rows' partial index (so it does not walk past the rows in flight), and
// the wide delivery rows are not read at all.
/** Bots `bot_<prefix><from>` … `bot_<prefix><to>` with a callback URL, in one statement. */
async function insertBots(db: TestDatabase['db'], prefix: string, from: number, to: number): Promise<void> {
  await db.query(
    `INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
                       webhook_secret_enc, callback_url, webhook_status, created_at)
     SELECT 'bot_' || $1 || g, $1 || '-' || g, $1 || '@example.com', $1 || '@example.com', 'helper', md5('k' || g),
            'svc_live_', 'x', 'http://127.0.0.1:9/hook', 'active', now()
       FROM generate_series($2::int, $3::int) g`,
    [prefix, from, to],
  );
}

describe.skipIf(!isPostgres)('webhook claim plan with statistics (PostgreSQL)', () => {
  let database: TestDatabase;
  let client: pg.Client;

  beforeAll(async () => {
    database = await createTestDatabase({ poolSize: 2 });
    const db = database.db;
    await insertBots(db, 'plan', 1, 50);
    // 5,000 events (and, by trigger, their deliveries), due a minute ago, round the 50 bots.
    await db.query(
      `INSERT INTO events (id, bot_id, type, body, created_at)
       SELECT 'evt_plan' || lpad(g::text, 8, '0'), 'bot_plan' || (g % 50 + 1), 'wallet.funded', '{}',
              now() - interval '1 minute' + g * interval '1 microsecond'
         FROM generate_series(1, 5000) g`,
    );
    await db.query('ANALYZE');
    client = new pg.Client({
      connectionString: POSTGRES_URL,
      options: `-c search_path=${database.schema}`,
    });
    await client.connect();
    // Two batches under lease, as while a worker's sends are out.
    for (const token of ['lease-a', 'lease-b']) {
      await client.query(
        `SELECT * FROM webhook_claim(now(), now() + interval '1 minute', $1, 8, 128, '{}', 512)`,
        [token],
      );
    }
  });
  afterAll(async () => {
    await client?.end();
    await database?.drop();
  });

  it('reads the ranked rows by primary key, not by comparing every due row with each of them', async () => {
    let claimed = 0;
    const plans = await nestedPlans(
      client,
      async () => {
        const r = await client.query(
          `SELECT * FROM webhook_claim(now(), now() + interval '1 minute', 'lease-c', 8, 128, '{}', 512)`,
        );
        claimed = r.rows.length;
      },
      { analyze: true },
    );
    expect(claimed).toBe(128);
    const plan = plans.find((n) => n.includes('CTE picked'));
    expect(plan, 'auto_explain logged the claim statement').toBeDefined();
    const picked = (plan ?? '').slice(
      (plan ?? '').indexOf('CTE picked'),
      (plan ?? '').indexOf('CTE claimed'),
    );
    expect(picked).toMatch(/Index Scan using webhook_queue_pkey/);
    expect(picked).toMatch(/Index Cond: \(delivery_id = ANY/);
    expect(picked).not.toMatch(/Join Filter/);
    // The bots at their bound (left out of the candidates) are read from the leased rows' partial
    // index, never by reading the queue whole.
    const lines = (plan ?? '').split('\n');
    const at = lines.findIndex((l) => /Filter: \(count\(\*\) >= /.test(l));
    expect(at, 'the count of live leases per bot').toBeGreaterThan(0);
    const full = lines.slice(at, at + 8).join('\n');
    expect(full).toMatch(/Scan (on|using) webhook_queue_leased_idx/);
    expect(plan).not.toMatch(/Seq Scan on webhook_queue/);
    expect(plan).not.toMatch(/Seq Scan on webhook_deliveries/);
    // The window of due rows is read in claim order (due time, then event order: 0040) from the due
    // index, up to its limit, not sorted from every due row; the 256 rows under lease at the head of
    // the queue are not in that index, so the scan reads only the rows it returns.
    const window = lines.findIndex((l) =>
      /Index Scan using webhook_queue_due_idx on webhook_queue q /.test(l),
    );
    expect(window, 'the window read from the due index').toBeGreaterThan(0);
    expect(lines[window]).toMatch(/actual rows=512 loops=1/);
    expect(lines.slice(window + 1, window + 3).join('\n')).not.toMatch(/Rows Removed by Filter/);
    expect(plan).not.toMatch(/Sort Key: q\.due_at, q\.seq\n\s+Sort Method/);
    // What the sends need is read by primary key for the claimed rows only, from their events (the
    // queue row carries the event's id), never from the wide delivery rows.
    expect(plan).toMatch(/Index Scan using events_pkey on events e/);
    expect(plan).not.toMatch(/on webhook_deliveries/);
  });
});

// A bot at its bound with a backlog older than every other row (migration 0058, webhook_park.sql):
// before, every claim's window walked past all of that bot's due rows (each a heap fetch to read its
// bot) before reaching anyone else's; once the worker's park call has held them back, the window
// meets only the bot's next few rows. Read off the plan PostgreSQL really runs (rows removed by the
// window scan's filter), not off a timing.
describe.skipIf(!isPostgres)(
  'webhook claim with a bot’s backlog at the head of the queue (PostgreSQL)',
  () => {
    let database: TestDatabase;
    let client: pg.Client;
    const BACKLOG = 5_000;

    beforeAll(async () => {
      database = await createTestDatabase({ poolSize: 2 });
      const db = database.db;
      await insertBots(db, 'back', 0, 20);
      // bot_back0: BACKLOG events due two minutes ago; twenty others: 20 each, due a minute ago.
      await db.query(
        `INSERT INTO events (id, bot_id, type, body, created_at)
       SELECT 'evt_back0x' || lpad(g::text, 8, '0'), 'bot_back0', 'wallet.funded', '{}',
              now() - interval '2 minutes' + g * interval '1 microsecond'
         FROM generate_series(1, $1::int) g`,
        [BACKLOG],
      );
      await db.query(
        `INSERT INTO events (id, bot_id, type, body, created_at)
       SELECT 'evt_backy' || lpad(g::text, 8, '0'), 'bot_back' || (g % 20 + 1), 'wallet.funded', '{}',
              now() - interval '1 minute' + g * interval '1 microsecond'
         FROM generate_series(1, 400) g`,
      );
      await db.query('ANALYZE');
      client = new pg.Client({
        connectionString: POSTGRES_URL,
        options: `-c search_path=${database.schema}`,
      });
      await client.connect();
      // bot_back0 takes its 8 slots (its rows are the oldest): it is at its bound.
      const first = await client.query(
        `SELECT * FROM webhook_claim(now(), now() + interval '1 minute', 'lease-a', 8, 8, '{}', 64)`,
      );
      expect(first.rows.map((r) => r.bot_id)).toEqual(Array(8).fill('bot_back0'));
    });
    afterAll(async () => {
      await client?.end();
      await database?.drop();
    });

    /** The claim's window scan, as PostgreSQL ran it, and the bots of the rows it claimed. */
    async function claimWindow(token: string) {
      let bots: string[] = [];
      const plans = await nestedPlans(
        client,
        async () => {
          const r = await client.query(
            `SELECT * FROM webhook_claim(now(), now() + interval '1 minute', $1, 8, 16, '{}', 64)`,
            [token],
          );
          bots = r.rows.map((row) => row.bot_id);
        },
        { analyze: true },
      );
      const plan = plans.find((n) => n.includes('CTE picked')) ?? '';
      const lines = plan.split('\n');
      const at = lines.findIndex((l) => /Index Scan using webhook_queue_due_idx on webhook_queue q /.test(l));
      expect(at, 'the window read from the due index').toBeGreaterThan(0);
      const removed = /Rows Removed by Filter: (\d+)/.exec(lines.slice(at + 1, at + 4).join('\n'));
      return { removed: Number(removed?.[1] ?? 0), bots };
    }

    it('the worker’s park call holds the backlog back: the window no longer walks past it', async () => {
      // Before: the window walks past every due row of the bot at its bound.
      const before = await claimWindow('lease-b');
      expect(before.removed).toBeGreaterThanOrEqual(BACKLOG - 8 - 16);
      expect(before.bots).not.toContain('bot_back0');
      const [parked] = (await client.query('SELECT * FROM webhook_park(now(), 8, 10000)')).rows;
      expect(parked).toEqual({ held: BACKLOG - 8 - 16, released: 0 });
      // After: only its next 2 × 8 rows are left in the window's way.
      const after = await claimWindow('lease-c');
      expect(after.removed).toBeLessThanOrEqual(16);
      expect(after.bots).toHaveLength(16);
      expect(after.bots).not.toContain('bot_back0');
    });
  },
);
