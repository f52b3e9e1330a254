import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { pruneExpired, RETENTION } from '../../src/jobs/retention.ts';
import { newId, newTimeOrderedId, sortableTime, TIME_CHARS } from '../../src/platform/ids.ts';
import { IdParam } from '../../src/platform/schemas.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { isPostgres } from '../support/db.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { checkout, purchase, setupCard } from '../checkout/helpers.ts';
import { emit } from './helpers.ts';

const DAY = 86_400_000;

describe('data retention (src/jobs/retention.ts)', () => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
  });
  afterAll(async () => {
    await svc.close();
  });

  /** An event with its delivery set to the given state, created `ageDays` ago. */
  async function eventAged(
    botId: string,
    ageDays: number,
    delivery: { status: string; lastAttemptDaysAgo?: number; leasedFor?: number; attempts?: number },
  ) {
    const at = svc.clock.now() - ageDays * DAY;
    const e = await svc.ctx.db.transaction((tx) =>
      emitEvent(tx, { botId, type: 'wallet.funded', data: { i: ageDays }, at }),
    );
    const last =
      delivery.lastAttemptDaysAgo === undefined
        ? null
        : new Date(svc.clock.now() - delivery.lastAttemptDaysAgo * DAY);
    const [d] = await svc.ctx.db.query<{ id: string }>(
      `UPDATE webhook_deliveries SET status = $2, last_attempt_at = $3, attempts = $4
        WHERE event_id = $1 RETURNING id`,
      [e.id, delivery.status, last, delivery.attempts ?? (last ? 1 : 0)],
    );
    // A lease is held on the delivery's queue row (0046); a settled delivery has none, unless a send
    // is still out (an acknowledgement, or an instance of the previous version settling it meanwhile).
    if (delivery.leasedFor) {
      await svc.ctx.db.query(
        `INSERT INTO webhook_queue (delivery_id, event_id, bot_id, seq, attempts, due_at, locked_until, lock_token)
         SELECT d.id, d.event_id, d.bot_id, coalesce(d.seq, 0), d.attempts, d.next_attempt_at, $2, 'tok'
           FROM webhook_deliveries d WHERE d.id = $1
         ON CONFLICT (delivery_id) DO UPDATE SET locked_until = EXCLUDED.locked_until, lock_token = 'tok'`,
        [d!.id, new Date(svc.clock.now() + delivery.leasedFor)],
      );
    }
    for (let n = 1; n <= (delivery.attempts ?? (last ? 1 : 0)); n++) {
      await svc.ctx.db.query(
        `INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, ok, error) VALUES ($1, $2, $3, false, 'x')`,
        [d!.id, n, last ?? new Date(at)],
      );
    }
    return { eventId: e.id, deliveryId: d!.id };
  }

  async function exists(table: string, column: string, value: unknown): Promise<boolean> {
    const rows = await svc.ctx.db.query(`SELECT 1 FROM ${table} WHERE ${column} = $1`, [value]);
    return rows.length > 0;
  }

  it('lists every pruned table once, with its condition', () => {
    expect(RETENTION.map((r) => r.table)).toEqual([
      'events',
      'checkout_idempotency',
      'owner_idempotency',
      'rate_limits',
      'rate_limit_hits',
      'audit_log',
    ]);
    expect(RETENTION.some((r) => /ledger|confirmation/.test(r.table))).toBe(false);
  });

  it('removes exactly what is due and keeps what is still needed', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const b = bot.bot_id;
    const gone = [
      await eventAged(b, 31, { status: 'delivered', lastAttemptDaysAgo: 31, attempts: 2 }),
      await eventAged(b, 40, { status: 'failed', lastAttemptDaysAgo: 39, attempts: 6 }),
      await eventAged(b, 35, { status: 'acked' }),
    ];
    const kept = [
      await eventAged(b, 29, { status: 'delivered', lastAttemptDaysAgo: 29 }), // young
      await eventAged(b, 60, { status: 'pending', lastAttemptDaysAgo: 60 }), // still retrying
      await eventAged(b, 60, { status: 'failed', lastAttemptDaysAgo: 2 }), // retried by hand lately
      await eventAged(b, 60, { status: 'delivered', lastAttemptDaysAgo: 45, leasedFor: 60_000 }), // leased
    ];
    const now = svc.clock.now();
    await svc.ctx.db.query(
      `INSERT INTO checkout_idempotency (bot_id, key, request_hash, created_at) VALUES
         ($1, 'old', 'h', $2), ($1, 'young', 'h', $3)`,
      [b, new Date(now - DAY - 1000), new Date(now - DAY + 60_000)],
    );
    await svc.ctx.db.query(
      `INSERT INTO owner_idempotency (owner_id, key, request_hash, created_at) VALUES
         ($1, 'old', 'h', $2), ($1, 'young', 'h', $3)`,
      [owner.id, new Date(now - DAY - 1000), new Date(now - DAY + 60_000)],
    );
    await svc.ctx.db.query(
      `INSERT INTO rate_limits (key, hits) VALUES ('rt:old', ARRAY[$1::timestamptz, $1]), ('rt:young', ARRAY[$1::timestamptz, $2])`,
      [new Date(now - 2 * DAY), new Date(now - DAY + 60_000)],
    );
    await svc.ctx.db.query(`INSERT INTO rate_limit_hits (key, at) VALUES ('rt:old', $1), ('rt:young', $2)`, [
      new Date(now - DAY - 1000),
      new Date(now - DAY + 60_000),
    ]);
    await svc.ctx.db.query(
      `INSERT INTO audit_log (owner_id, action, created_at) VALUES ($1, 'rt.old', $2), ($1, 'rt.young', $3)`,
      [owner.id, new Date(now - 366 * DAY), new Date(now - 364 * DAY)],
    );
    const [ledgerBefore] = await svc.ctx.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM ledger_entries',
    );

    // Small batches: the walk has to go on across batches.
    const deleted = await pruneExpired(svc.ctx.db, svc.ctx.config, now, { batch: 2 });

    for (const g of gone) {
      expect(await exists('events', 'id', g.eventId)).toBe(false);
      expect(await exists('webhook_deliveries', 'id', g.deliveryId)).toBe(false);
      expect(await exists('webhook_attempts', 'delivery_id', g.deliveryId)).toBe(false);
    }
    for (const k of kept) {
      expect(await exists('events', 'id', k.eventId)).toBe(true);
      expect(await exists('webhook_deliveries', 'id', k.deliveryId)).toBe(true);
    }
    expect(await exists('checkout_idempotency', 'key', 'old')).toBe(false);
    expect(await exists('checkout_idempotency', 'key', 'young')).toBe(true);
    expect(await exists('owner_idempotency', 'key', 'old')).toBe(false);
    expect(await exists('owner_idempotency', 'key', 'young')).toBe(true);
    expect(await exists('rate_limits', 'key', 'rt:old')).toBe(false);
    expect(await exists('rate_limits', 'key', 'rt:young')).toBe(true);
    expect(await exists('rate_limit_hits', 'key', 'rt:old')).toBe(false);
    expect(await exists('rate_limit_hits', 'key', 'rt:young')).toBe(true);
    expect(await exists('audit_log', 'action', 'rt.old')).toBe(false);
    expect(await exists('audit_log', 'action', 'rt.young')).toBe(true);
    expect(deleted).toMatchObject({
      events: 3,
      checkout_idempotency: 1,
      rate_limits: 1,
      rate_limit_hits: 1,
      audit_log: 1,
    });
    // Money history is never pruned.
    const [ledgerAfter] = await svc.ctx.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM ledger_entries',
    );
    expect(ledgerAfter!.n).toBe(ledgerBefore!.n);
    // Nothing more is due.
    expect(await pruneExpired(svc.ctx.db, svc.ctx.config, now)).toMatchObject({ events: 0, audit_log: 0 });
  });

  it('concurrent pruners delete each row once, and a checkout goes through while a batch loop runs', async () => {
    // A database of its own, filled oldest first as a real one is (keys grow with time).
    const own = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
    try {
      const now = own.clock.now();
      const n = 300;
      await own.ctx.db.query(
        `INSERT INTO audit_log (action, created_at) SELECT 'rt.bulk', $1 FROM generate_series(1, $2::int)`,
        [new Date(now - 400 * DAY), n],
      );
      const quiet = newId('bot');
      await own.ctx.db.query(
        `INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
                           webhook_secret_enc, webhook_status, created_at)
         VALUES ($1, 'old', 'old@example.com', 'old@example.com', 'helper', 'h', 'svc_live_', 'x', 'active', $2)`,
        [quiet, new Date(now - 50 * DAY)],
      );
      for (let i = 0; i < 40; i++) {
        const e = await own.ctx.db.transaction((tx) =>
          emitEvent(tx, { botId: quiet, type: 'wallet.funded', data: { i }, at: now - 45 * DAY }),
        );
        await own.ctx.db.query(
          `UPDATE webhook_deliveries SET status = 'delivered', attempts = 1, last_attempt_at = $2 WHERE event_id = $1`,
          [e.id, new Date(now - 45 * DAY)],
        );
      }
      const owner = await createOwner(own);
      const bot = await activeBot(own, owner, { fundCents: 10_000 });
      const card = await setupCard(own, owner, bot.bot_id, {
        approval_mode: 'auto_approve_under_threshold',
        approval_threshold_cents: 1_000_000,
        per_transaction_cents: 100_000,
        daily_cents: 10_000_000,
        monthly_cents: 100_000_000,
      });
      let checkoutDone = false;
      let batchesAfterCheckout = 0;
      const onBatch = () => {
        if (checkoutDone) batchesAfterCheckout++;
      };
      const [a, b, purchaseResult] = await Promise.all([
        pruneExpired(own.ctx.db, own.ctx.config, now, { batch: 3, onBatch }),
        pruneExpired(own.ctx.db, own.ctx.config, now, { batch: 3, onBatch }),
        (async () => {
          // Let the loops start first.
          await new Promise((r) => setTimeout(r, 20));
          const res = await checkout(own, bot, purchase(card.real_profile_index, 100));
          checkoutDone = true;
          return res;
        })(),
      ]);
      expect(purchaseResult.statusCode, purchaseResult.body).toBe(200);
      expect(a.audit_log! + b.audit_log!).toBe(n);
      expect(a.events! + b.events!).toBe(40);
      const [left] = await own.ctx.db.query<{ n: number }>(
        `SELECT (SELECT count(*) FROM audit_log WHERE action = 'rt.bulk')
              + (SELECT count(*) FROM events WHERE bot_id = $1) AS n`,
        [quiet],
      );
      expect(Number(left!.n)).toBe(0);
      // The checkout did not wait for the loops to finish.
      if (isPostgres) expect(batchesAfterCheckout).toBeGreaterThan(0);
    } finally {
      await own.close();
    }
  });

  it('keeps every attempt of a delivery; the owner log shows them oldest first', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: 'http://127.0.0.1:9/refused' } });
    const worker = new DeliveryWorker(svc.ctx);
    try {
      const { id } = await emit(svc, bot.bot_id);
      await worker.runOnce();
      svc.clock.advance(60_000);
      await worker.runOnce();
      const [d] = await svc.ctx.db.query<{ id: string }>(
        'SELECT id FROM webhook_deliveries WHERE event_id = $1',
        [id],
      );
      const rows = await svc.ctx.db.query<{ attempt: number; ok: boolean; error: string }>(
        'SELECT attempt, ok, error FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt',
        [d!.id],
      );
      expect(rows).toEqual([
        { attempt: 1, ok: false, error: 'connection refused' },
        { attempt: 2, ok: false, error: 'connection refused' },
      ]);
      const detail = await svc.app.inject({
        url: `/api/v1/owner/webhook-deliveries/${d!.id}`,
        headers: owner.auth,
      });
      expect(detail.statusCode, detail.body).toBe(200);
      expect(detail.json().delivery).toMatchObject({ id: d!.id, attempts: 2 });
      expect(detail.json().delivery.attempt_log.map((a: { attempt: number }) => a.attempt)).toEqual([1, 2]);
      expect(detail.json().delivery.attempt_log[0]).toMatchObject({
        attempt: 1,
        ok: false,
        response_status: null,
        error: 'connection refused',
      });
      const list = await svc.app.inject({
        url: `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries?include=attempts`,
        headers: owner.auth,
      });
      const mine = list.json().deliveries.find((x: { id: string }) => x.id === d!.id);
      expect(mine.attempt_log).toHaveLength(2);
      // Without include the list is as before.
      const plain = await svc.app.inject({
        url: `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries`,
        headers: owner.auth,
      });
      expect(plain.json().deliveries[0].attempt_log).toBeUndefined();
      // Another owner sees nothing.
      const stranger = await createOwner(svc);
      const denied = await svc.app.inject({
        url: `/api/v1/owner/webhook-deliveries/${d!.id}`,
        headers: stranger.auth,
      });
      expect(denied.statusCode).toBe(404);
    } finally {
      await worker.stop();
    }
  });
  // A year of events must not make writing the next one slower: event (and delivery, attempt) ids
  // begin with their creation time, so each new row goes to the right-hand end of the indexes on
  // them. Broken if ids are random again, or if the time part stops sorting like the time.
  it('event and delivery ids sort by creation time, in JavaScript and in the database', async () => {
    const edges = [0, 1, 31, 32, 1_700_000_000_000, Date.UTC(2026, 10, 24), 2 ** 50 - 1];
    const times = [...edges, ...Array.from({ length: 500 }, () => Math.floor(Math.random() * 2 ** 50))];
    const sorted = [...times].sort((a, b) => a - b);
    const encoded = sorted.map(sortableTime);
    expect(encoded.every((t) => t.length === TIME_CHARS)).toBe(true);
    for (let i = 1; i < encoded.length; i++) {
      if (sorted[i] === sorted[i - 1]) expect(encoded[i]).toBe(encoded[i - 1]);
      else expect((encoded[i - 1] as string) < (encoded[i] as string)).toBe(true);
    }
    expect(sortableTime(-5)).toBe(sortableTime(0)); // clamped, never a shorter or longer string
    expect(sortableTime(2 ** 60)).toBe(sortableTime(2 ** 50 - 1));
    // Still as unguessable as any id: 16 random characters after the time part, and a valid id.
    const same = new Set(Array.from({ length: 1000 }, () => newTimeOrderedId('evt', 1_700_000_000_000)));
    expect(same.size).toBe(1000);
    const pattern = new RegExp(IdParam('evt').pattern as string);
    expect([...same].every((id) => pattern.test(id) && id.length === 4 + TIME_CHARS + 16)).toBe(true);

    // In the database (its collation, both legs): ORDER BY id is ORDER BY created_at.
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const base = svc.clock.now() - 400 * DAY;
    const offsets = Array.from({ length: 60 }, (_, i) => i * 7 * 3_600_000 + (i % 7) * 31 + (i % 3));
    for (const offset of offsets.sort(() => Math.random() - 0.5)) {
      await svc.ctx.db.transaction((tx) =>
        emitEvent(tx, { botId: bot.bot_id, type: 'wallet.funded', data: { offset }, at: base + offset }),
      );
    }
    const byId = await svc.ctx.db.query<{ created_at: Date }>(
      'SELECT created_at FROM events WHERE bot_id = $1 AND created_at < $2 ORDER BY id',
      [bot.bot_id, new Date(base + DAY * 30)],
    );
    expect(byId.map((r) => r.created_at.getTime())).toEqual(
      offsets.sort((a, b) => a - b).map((o) => base + o),
    );
    const deliveries = await svc.ctx.db.query<{ created_at: Date }>(
      'SELECT created_at FROM webhook_deliveries WHERE bot_id = $1 AND created_at < $2 ORDER BY id',
      [bot.bot_id, new Date(base + DAY * 30)],
    );
    expect(deliveries.map((r) => r.created_at.getTime())).toEqual(byId.map((r) => r.created_at.getTime()));
  });
  // Pruning deletes the oldest rows, whose dead index entries then sit at the low end of the id
  // indexes until vacuum; a statement planned at every call probes that end (src/platform/db/
  // migrate.ts, "Generic plans"), which bench:retention showed as +50 % delivery latency.
  it('the hot database functions are planned once per connection, not at every call', async () => {
    const rows = await svc.ctx.db.query<{ proname: string; config: string[] | null }>(
      `SELECT proname, proconfig AS config FROM pg_proc
        WHERE proname IN ('spend_run', 'webhook_claim', 'webhook_record_and_claim')
          AND pronamespace = current_schema()::regnamespace`,
    );
    expect(new Set(rows.map((r) => r.proname))).toEqual(
      new Set(['spend_run', 'webhook_claim', 'webhook_record_and_claim']),
    );
    for (const r of rows) expect(r.config).toContain('plan_cache_mode=force_generic_plan');
    // …and never JIT-compiled: a generic plan's estimate can pass jit_above_cost (26 ms per call).
    for (const r of rows) expect(r.config).toContain('jit=off');
  });

  // Plans a connection made while the tables were small read them whole as they grow, until the next
  // analyse (src/platform/db/migrate.ts, "Index plans"; test/foundation/ledgerPlan.test.ts).
  it('the checkout call and the ledger balance check never plan a scan of a whole table', async () => {
    const rows = await svc.ctx.db.query<{ proname: string; config: string[] | null }>(
      `SELECT proname, proconfig AS config FROM pg_proc
        WHERE proname IN ('spend_run', 'ledger_check_balanced')
          AND pronamespace = current_schema()::regnamespace`,
    );
    expect(new Set(rows.map((r) => r.proname))).toEqual(new Set(['spend_run', 'ledger_check_balanced']));
    for (const r of rows) expect(r.config).toContain('enable_seqscan=off');
  });
});
