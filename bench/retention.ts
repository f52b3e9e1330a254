import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { median, saveResults } from './lib.ts';

// npm run bench:retention (PostgreSQL: BENCH_DATABASE_URL or TEST_DATABASE_URL)
//
// Issue 19 item 2: the tables that only grew are pruned now; what does a large history cost?
//   1. A schema with BENCH_RETENTION_ROWS (default 10,000,000) delivered webhook deliveries, their
//      events and attempts, spread over a year, built with generate_series (triggers off for the
//      bulk insert); beside it an empty schema. In each: checkout p50 (sequential, in-process
//      through the HTTP stack) and commit-to-receipt p50 of a delivery to a loopback receiver.
//      Goal: ratio big ÷ empty ≤ 1.2 for both.
//   2. Pruning throughput in the big schema (the retention job's own loop, at most
//      BENCH_PRUNE_SECONDS): rows deleted per second ÷ what 1,000 events/s produce (an event, its
//      delivery and one attempt: 3 rows each, so 3,000 rows/s). Goal ≥ 1: pruning keeps up.
// Both schemas are dropped at the end, unless BENCH_RETENTION_KEEP=1 (the big schema's name is
// printed); BENCH_RETENTION_SCHEMA=<name> measures such a kept schema again without rebuilding it.

process.env.TEST_DB = 'postgres';
process.env.TEST_DATABASE_URL ??= process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const { createTestDatabase } = await import('../test/support/db.ts');
const { activeBot, createOwner, createTestService } = await import('../test/support/service.ts');
const { splitCard } = await import('../test/support/cards.ts');
const { systemClock } = await import('../src/platform/clock.ts');
const { emitEvent } = await import('../src/events/outbox.ts');
const { DeliveryWorker } = await import('../src/webhooks/worker.ts');
const { openPostgres } = await import('../src/platform/db/postgres.ts');
const { sortableTime, TIME_CHARS } = await import('../src/platform/ids.ts');
const { migrate } = await import('../src/platform/db/migrate.ts');
const { pruneExpired } = await import('../src/jobs/retention.ts');

type Svc = Awaited<ReturnType<typeof createTestService>>;

const ROWS = Number(process.env.BENCH_RETENTION_ROWS ?? 10_000_000);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 200);
const PRUNE_SECONDS = Number(process.env.BENCH_PRUNE_SECONDS ?? 60);
const EVENTS_PER_SECOND = 1_000;
const ROWS_PER_EVENT = 3;

/** A year of delivered history: ROWS events, deliveries and attempts on 50 bots of their own. */
async function fillHistory(svc: Svc): Promise<void> {
  const db = svc.ctx.db;
  const started = Date.now();
  await db.query(
    `INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
                       webhook_secret_enc, webhook_status, created_at)
     SELECT 'bot_hist' || g, 'hist' || g, 'hist@example.com', 'hist@example.com', 'helper', md5(g::text),
            'svc_live_', 'x', 'active', now() - interval '400 days'
       FROM generate_series(1, 50) g`,
  );
  // Ids as the service makes them (src/platform/ids.ts): the creation time's sortable characters,
  // then 16 more (here the row number in letters instead of random ones), so that the history sits
  // in the id indexes where a year of real events would, and today's rows go after it.
  const ms = 'floor(extract(epoch FROM at) * 1000)::bigint';
  const timePart = Array.from(
    { length: TIME_CHARS },
    (_, i) =>
      `substr('234567abcdefghijklmnopqrstuvwxyz', ((${ms} >> ${5 * (TIME_CHARS - 1 - i)}) & 31)::int + 1, 1)`,
  ).join(' || ');
  const suffix = `${timePart} || translate(lpad(g::text, 16, '0'), '0123456789', 'abcdefghij')`;
  const probe = Date.UTC(2026, 0, 5, 12, 0, 0, 123);
  const [check] = await db.query<{ t: string }>(
    `SELECT ${timePart} AS t FROM (SELECT $1::timestamptz AS at) x`,
    [new Date(probe)],
  );
  if (check?.t !== sortableTime(probe)) throw new Error(`SQL time part ${check?.t} ≠ ${sortableTime(probe)}`);
  // Triggers off for the bulk insert (the delivery trigger and NOTIFY would cost a statement per row).
  const chunk = 1_000_000;
  for (let from = 1; from <= ROWS; from += chunk) {
    const to = Math.min(ROWS, from + chunk - 1);
    await db.transaction(async (tx) => {
      await tx.query('SET LOCAL session_replication_role = replica');
      const params = [from, to, ROWS];
      const rows = `(SELECT g, now() - interval '365 days' + (g::float8 / $3) * interval '364 days' AS at
                       FROM generate_series($1::int, $2::int) g) h`;
      await tx.query(
        `INSERT INTO events (id, bot_id, type, body, created_at, delivered_at)
         SELECT 'evt_' || ${suffix}, 'bot_hist' || (1 + g % 50), 'purchase.approved', '{"id":"evt_h"}', at, at
           FROM ${rows}`,
        params,
      );
      await tx.query(
        `INSERT INTO webhook_deliveries (id, event_id, bot_id, event_type, status, attempts, next_attempt_at,
                                         last_attempt_at, delivered_at, response_status, target, duration_ms, created_at)
         SELECT 'whd_' || ${suffix}, 'evt_' || ${suffix}, 'bot_hist' || (1 + g % 50), 'purchase.approved',
                'delivered', 1, at, at, at, 200, 'https://hist.example/hook', 12, at
           FROM ${rows}`,
        params,
      );
      await tx.query(
        `INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, ok, response_status, duration_ms, target)
         SELECT 'whd_' || ${suffix}, 1, at, true, 200, 12, 'https://hist.example/hook'
           FROM ${rows}`,
        params,
      );
    });
    console.log(`  history: ${to} of ${ROWS} rows (${((Date.now() - started) / 1000).toFixed(0)} s)`);
  }
  await db.query('ANALYZE');
}

interface Measured {
  checkoutP50: number;
  deliveryP50: number;
}

async function measure(svc: Svc): Promise<Measured> {
  const owner = await createOwner(svc);
  await svc.app.inject({
    method: 'PUT',
    url: '/api/v1/owner/guardrails',
    headers: owner.auth,
    payload: {
      per_transaction_cents: 100_000,
      daily_budget_cents: 100_000_000,
      monthly_budget_cents: 1_000_000_000,
    },
  });
  const arrivals = new Map<string, number>();
  const receiver = createServer((req, res) => {
    const id = req.headers['x-service-event-id'];
    req.resume();
    req.on('end', () => {
      if (typeof id === 'string') arrivals.set(id, performance.now());
      res.writeHead(200);
      res.end('ok');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const port = (receiver.address() as AddressInfo).port;
  const bot = await activeBot(svc, owner, {
    fundCents: 1_000_000,
    body: { callback_url: `http://127.0.0.1:${port}/hook` },
  });
  const start = await svc.app.inject({
    method: 'POST',
    url: `/api/v1/owner/bots/${bot.bot_id}/cards`,
    headers: owner.auth,
    payload: { label: 'bench' },
  });
  const card = start.json() as Parameters<typeof splitCard>[0] & {
    card_id: string;
    real_profile_index: number;
  };
  const split = splitCard({ ...card, bot_id: bot.bot_id });
  await svc.app.inject({
    method: 'POST',
    url: `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}/activate`,
    headers: owner.auth,
    payload: split.activation,
  });
  await svc.app.inject({
    method: 'PATCH',
    url: `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}`,
    headers: owner.auth,
    payload: {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 10_000_000,
      per_transaction_cents: 100_000,
      daily_cents: 100_000_000,
      monthly_cents: 1_000_000_000,
    },
  });
  await svc.app.inject({
    method: 'PUT',
    url: `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}/profiles/${card.real_profile_index}`,
    headers: owner.auth,
    payload: { allowance_cents: 100_000_000 },
  });
  const worker = new DeliveryWorker(svc.ctx);
  await worker.start();
  try {
    const checkouts: number[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      const t = performance.now();
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/merchant/checkout',
        headers: bot.auth,
        payload: {
          profile_index: card.real_profile_index,
          merchant_name: 'Acme Books',
          merchant_url: 'https://acme.example/books/1',
          item_name: 'A book',
          amount_cents: 100,
          category: 'retail',
        },
      });
      checkouts.push(performance.now() - t);
      if (res.statusCode !== 200) throw new Error(`checkout ${res.statusCode}: ${res.body}`);
    }
    const deliveries: number[] = [];
    for (let i = 0; i < SAMPLES / 2; i++) {
      const e = await svc.ctx.db.transaction((tx) =>
        emitEvent(tx, { botId: bot.bot_id, type: 'wallet.funded', data: { i }, at: Date.now() }),
      );
      const committed = performance.now();
      for (let k = 0; k < 2_000 && !arrivals.has(e.id); k++) await new Promise((r) => setTimeout(r, 1));
      deliveries.push((arrivals.get(e.id) ?? Number.NaN) - committed);
    }
    console.log(
      `  round: checkout p50 ${median(checkouts).toFixed(2)} ms, delivery p50 ${median(deliveries).toFixed(2)} ms`,
    );
    return { checkoutP50: median(checkouts), deliveryP50: median(deliveries) };
  } finally {
    await worker.stop();
    receiver.closeAllConnections();
    receiver.close();
  }
}

const env = {
  CHECKOUT_RATE_LIMIT_PER_HOUR: '1000000',
  ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
  LOG_LEVEL: 'warn',
};
const empty = await createTestService({ env, clock: systemClock as never });
const KEPT = process.env.BENCH_RETENTION_SCHEMA;
const KEEP = KEPT !== undefined || process.env.BENCH_RETENTION_KEEP === '1';
const bigDatabase = KEPT
  ? {
      schema: KEPT,
      db: await openPostgres({ connectionString: process.env.TEST_DATABASE_URL, schema: KEPT, max: 20 }),
      drop: async () => {},
    }
  : await createTestDatabase();
if (KEPT) await migrate(bigDatabase.db); // function files changed since it was kept
const big = await createTestService({
  database: bigDatabase,
  env,
  clock: systemClock as never,
});
try {
  const t0 = Date.now();
  if (KEPT === undefined) {
    console.log(`building the history: ${ROWS} deliveries, events and attempts over a year…`);
    await fillHistory(big);
  }
  const buildSeconds = (Date.now() - t0) / 1000;
  console.log(`history built in ${buildSeconds.toFixed(0)} s in schema ${bigDatabase.schema}`);

  // Alternate, and keep the better of two rounds each, as the machine may be shared.
  const e1 = await measure(empty);
  const b1 = await measure(big);
  const e2 = await measure(empty);
  const b2 = await measure(big);
  const e = {
    checkoutP50: Math.min(e1.checkoutP50, e2.checkoutP50),
    deliveryP50: Math.min(e1.deliveryP50, e2.deliveryP50),
  };
  const b = {
    checkoutP50: Math.min(b1.checkoutP50, b2.checkoutP50),
    deliveryP50: Math.min(b1.deliveryP50, b2.deliveryP50),
  };
  console.log(
    `checkout p50: ${b.checkoutP50.toFixed(1)} ms with the history, ${e.checkoutP50.toFixed(1)} ms without; ` +
      `delivery p50: ${b.deliveryP50.toFixed(1)} ms with, ${e.deliveryP50.toFixed(1)} ms without`,
  );

  // 2. Pruning: everything older than 30 days is due (about 11/12 of the history).
  let deletedUnits = 0;
  const deadline = Date.now() + PRUNE_SECONDS * 1000;
  const p0 = performance.now();
  let batches = 0;
  try {
    await pruneExpired(big.ctx.db, big.ctx.config, Date.now(), {
      onBatch: (table, n) => {
        if (table === 'events') deletedUnits += n;
        batches++;
        if (Date.now() > deadline) throw new Error('time box');
      },
    });
  } catch (error) {
    if ((error as Error).message !== 'time box') throw error;
  }
  const pruneSeconds = (performance.now() - p0) / 1000;
  const rowsPerSecond = (deletedUnits * ROWS_PER_EVENT) / pruneSeconds;
  const target = EVENTS_PER_SECOND * ROWS_PER_EVENT;
  console.log(
    `pruning: ${deletedUnits} events with their deliveries and attempts in ${pruneSeconds.toFixed(1)} s ` +
      `(${batches} batches) = ${Math.round(rowsPerSecond)} rows/s; keeping up with ${EVENTS_PER_SECOND} events/s ` +
      `needs ${target} rows/s: ratio ${(rowsPerSecond / target).toFixed(2)} (goal ≥ 1)`,
  );

  await saveResults('retention', [
    {
      benchmark: 'retention',
      database: 'postgres',
      metric: `checkout p50 ms with ${ROWS.toLocaleString('en')} past deliveries (a year)`,
      value: b.checkoutP50,
      baseline: 'checkout p50 ms, empty database',
      baselineValue: e.checkoutP50,
      ratio: b.checkoutP50 / e.checkoutP50,
      goal: '≤ 1.2',
    },
    {
      benchmark: 'retention',
      database: 'postgres',
      metric: `delivery commit-to-receipt p50 ms with ${ROWS.toLocaleString('en')} past deliveries`,
      value: b.deliveryP50,
      baseline: 'delivery p50 ms, empty database',
      baselineValue: e.deliveryP50,
      ratio: b.deliveryP50 / e.deliveryP50,
      goal: '≤ 1.2',
    },
    {
      benchmark: 'retention',
      database: 'postgres',
      metric: 'rows pruned per second (events + deliveries + attempts)',
      value: rowsPerSecond,
      baseline: `rows/s produced at ${EVENTS_PER_SECOND} events/s (${ROWS_PER_EVENT} per event)`,
      baselineValue: target,
      ratio: rowsPerSecond / target,
      goal: '≥ 1',
      note: `history built in ${buildSeconds.toFixed(0)} s`,
    },
  ]);
} finally {
  await big.close();
  if (KEEP) await bigDatabase.db.close();
  else await bigDatabase.drop();
  await empty.close();
}
