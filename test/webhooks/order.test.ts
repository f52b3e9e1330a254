import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { migrate } from '../../src/platform/db/migrate.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { type Received, Receiver } from './helpers.ts';

// A bot's webhooks start in the order its events were written (events.seq, copied onto the
// delivery row: migration 0040), also for events written in the same millisecond. Event and
// delivery ids order by millisecond only and are random within one, so a claim that ordered a bot's
// due rows by id handed a bot at its in-flight bound a later event before an earlier one. Here many
// events are written in one millisecond (the fake clock does not move), by one transaction and by
// many, and two services on one database (two instances) deliver them, each with its own worker.

const EVENTS = 120;

describe('per-bot delivery order', () => {
  let database: TestDatabase;
  let a: TestService;
  let b: TestService;
  let receiver: Receiver;

  beforeAll(async () => {
    database = await createTestDatabase();
    // The default WEBHOOK_TIMEOUT_MS (10 s): a timed-out attempt would wait for a retry the fake clock
    // never reaches, so the timeout is far above any stall of a loaded machine.
    a = await createTestService({ database });
    b = await createTestService({ database, clock: a.clock });
    receiver = await new Receiver().start();
  });
  afterAll(async () => {
    await receiver.close();
    await a?.close();
    await b?.close();
    await database?.drop();
  });

  /** A bot whose webhooks go to `path`, with its wallet.activated event already delivered. */
  async function bot(path: string) {
    const owner = await createOwner(a);
    const created = await activeBot(a, owner, { body: { callback_url: receiver.url(path) } });
    const worker = new DeliveryWorker(a.ctx);
    await worker.runOnce();
    await worker.stop();
    return created.bot_id;
  }

  /**
   * EVENTS events of one bot in one millisecond: half in one transaction, half one transaction
   * each. Returns their ids in the order they were written.
   */
  async function burst(botId: string): Promise<string[]> {
    const at = a.clock.now();
    const ids: string[] = [];
    await a.ctx.db.transaction(async (tx) => {
      for (let i = 0; i < EVENTS / 2; i++) {
        ids.push((await emitEvent(tx, { botId, type: 'wallet.funded', data: { n: i }, at })).id);
      }
    });
    for (let i = EVENTS / 2; i < EVENTS; i++) {
      const e = await a.ctx.db.transaction((tx) =>
        emitEvent(tx, { botId, type: 'wallet.funded', data: { n: i }, at }),
      );
      ids.push(e.id);
    }
    expect(a.clock.now()).toBe(at);
    // Their ids alone do not give that order (random within the millisecond): the test would not
    // tell an order by id from an order by sequence otherwise.
    expect([...ids].sort()).not.toEqual(ids);
    return ids;
  }

  /** Runs two instances' workers (per-bot bound `perBot`) until every event reached `path`. */
  async function deliver(path: string, perBot: number): Promise<string[]> {
    const funded = (r: Received) => r.url === path && r.headers['x-service-event'] === 'wallet.funded';
    const workers = [
      new DeliveryWorker(a.ctx, { perBotInFlight: perBot, pollMs: 50 }),
      new DeliveryWorker(b.ctx, { perBotInFlight: perBot, pollMs: 50 }),
    ];
    await Promise.all(workers.map((w) => w.start()));
    try {
      await receiver.waitFor((rs) => rs.filter(funded).length >= EVENTS, 60_000);
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
    }
    return receiver.requests.filter(funded).map((r) => JSON.parse(r.body).id as string);
  }

  it('a bot at a bound of one receives the events of one millisecond in the order they were written, across two instances', async () => {
    const botId = await bot('/one');
    const ids = await burst(botId);
    const got = await deliver('/one', 1);
    expect(got).toEqual(ids);
  });

  it('with a bound of three, no event is sent before all but two of the events written before it were received', async () => {
    const perBot = 3;
    const botId = await bot('/three');
    const ids = await burst(botId);
    const rank = new Map(ids.map((id, i) => [id, i]));
    // Answers come in arrival order, after a short pause, so the bot stays at its bound.
    receiver.respond = (_req, res) => {
      setTimeout(() => {
        res.writeHead(200);
        res.end('ok');
      }, 2);
    };
    const got = await deliver('/three', perBot);
    expect(new Set(got)).toEqual(new Set(ids));
    expect(got).toHaveLength(EVENTS);
    // When the event of rank r is claimed, every earlier one was claimed before it (claims take a
    // bot's rows in event order) and at most perBot - 1 of them are still in flight: the others
    // were answered, so received before it.
    const received = new Set<number>();
    for (const id of got) {
      const r = rank.get(id) ?? -1;
      let earlier = 0;
      for (const x of received) if (x < r) earlier++;
      expect(earlier, `event ${r} arrived after ${earlier} earlier ones`).toBeGreaterThanOrEqual(
        r - (perBot - 1),
      );
      received.add(r);
    }
  });
});

// Migrations 0040 and 0046 from the state a database had before them (as an upgraded deployment has
// it): deliveries without seq, written by the trigger of 0003, some still pending in one millisecond,
// one of them leased by an instance of the previous version (its send out), and no webhook queue.
describe('migrations 0040 and 0046: deliveries take their event order, and the pending ones their queue rows', () => {
  it('gives pending and failed deliveries their event seq, queues the pending ones with their lease, and the claim then serves them in that order', async () => {
    const { db, drop } = await createTestDatabase();
    try {
      await db.exec(`DROP TRIGGER webhook_deliveries_queue_sync ON webhook_deliveries;
        DROP FUNCTION webhook_queue_sync();
        DROP TABLE webhook_queue;
        ALTER TABLE webhook_deliveries RESET (fillfactor);
        CREATE INDEX webhook_deliveries_leased_idx ON webhook_deliveries (bot_id, locked_until)
          WHERE locked_until IS NOT NULL;
        ALTER TABLE webhook_deliveries DROP COLUMN seq;
        CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
        CREATE OR REPLACE FUNCTION webhook_delivery_for_event() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO webhook_deliveries (id, event_id, bot_id, event_type, next_attempt_at, created_at)
          VALUES ('whd_' || substr(NEW.id, position('_' in NEW.id) + 1), NEW.id, NEW.bot_id, NEW.type,
                  NEW.created_at, NEW.created_at);
          RETURN NEW;
        END $$;
        DELETE FROM schema_migrations WHERE version IN (40, 46, 58);`);
      await db.exec(`INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash,
                                       api_key_prefix, webhook_secret_enc, callback_url, webhook_status, created_at)
        VALUES ('bot_up', 'up', 'up@example.com', 'up@example.com', 'helper', md5('k'), 'svc_live_', 'x',
                'http://127.0.0.1:9/hook', 'active', now())`);
      const at = new Date('2026-11-28T08:00:00.000Z');
      const ids: string[] = [];
      await db.transaction(async (tx) => {
        for (let i = 0; i < 40; i++) {
          ids.push(
            (await emitEvent(tx, { botId: 'bot_up', type: 'wallet.funded', data: { i }, at: at.getTime() }))
              .id,
          );
        }
      });
      expect([...ids].sort()).not.toEqual(ids);
      const now = new Date(at.getTime() + 1000);
      const until = new Date(at.getTime() + 60_000);
      // The first is delivered, the second failed for good, the third out with an older instance
      // (leased on the delivery row, as that version did), the rest pending.
      await db.query(`UPDATE webhook_deliveries SET status = 'delivered' WHERE event_id = $1`, [ids[0]]);
      await db.query(`UPDATE webhook_deliveries SET status = 'failed' WHERE event_id = $1`, [ids[1]]);
      const [leased] = await db.query<{ id: string }>(
        `UPDATE webhook_deliveries SET locked_until = $2, lock_token = 'old-lease' WHERE event_id = $1 RETURNING id`,
        [ids[2], until],
      );

      // 0058 adds a column to the queue 0046 makes (the table was dropped above with the rest).
      expect(await migrate(db)).toEqual([40, 46, 58]);

      const rows = await db.query<{
        event_id: string;
        status: string;
        seq: string | null;
        event_seq: string;
      }>(
        `SELECT d.event_id, d.status, d.seq, e.seq AS event_seq
           FROM webhook_deliveries d JOIN events e ON e.id = d.event_id ORDER BY e.seq`,
      );
      expect(rows.map((r) => r.event_id)).toEqual(ids);
      expect(rows[0]).toMatchObject({ status: 'delivered', seq: null });
      for (const r of rows.slice(1)) expect(r.seq).toBe(r.event_seq);
      // The queue holds the pending deliveries only, in event order, the older instance's lease kept.
      const queued = await db.query<{
        event_id: string;
        seq: string;
        event_seq: string;
        lock_token: string | null;
      }>(
        `SELECT d.event_id, q.seq, e.seq AS event_seq, q.lock_token
           FROM webhook_queue q JOIN webhook_deliveries d ON d.id = q.delivery_id JOIN events e ON e.id = d.event_id
          ORDER BY q.seq`,
      );
      expect(queued.map((q) => q.event_id)).toEqual(ids.slice(2));
      for (const q of queued) expect(q.seq).toBe(q.event_seq);
      expect(queued.map((q) => q.lock_token)).toEqual(['old-lease', ...ids.slice(3).map(() => null)]);

      // A bound of one, one claim after another, each recording the one before: event order. The
      // first call records the older instance's send, against the lease the queue row took over.
      const got: string[] = [];
      let held: { id: string; token: string } = { id: leased!.id, token: 'old-lease' };
      for (let i = 0; i < 37; i++) {
        const token = `tok-${i}`;
        const claimed: Array<{ id: string; event_id: string }> = await db.query(
          `SELECT * FROM webhook_record_and_claim(ARRAY[$4], ARRAY[$5], '{t}', '{200}', '{ok}', '{NULL}', '{1}',
             '{x}', $1, '{60}', '{bot_up}', '{t}', '{0}', 3, 6, $2, $3, 1, 10, '{}', 100)`,
          [now, until, token, held.id, held.token],
        );
        expect(claimed).toHaveLength(1);
        got.push(claimed[0]!.event_id);
        held = { id: claimed[0]!.id, token };
      }
      expect(got).toEqual(ids.slice(3));
      const [recorded] = await db.query<{ status: string; attempts: number }>(
        'SELECT status, attempts FROM webhook_deliveries WHERE id = $1',
        [leased!.id],
      );
      expect(recorded).toEqual({ status: 'delivered', attempts: 1 });
      // The failed one, retried by its owner later, is queued again and sent like any other due row.
      await db.query(
        `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = $2 WHERE event_id = $1`,
        [ids[1], now],
      );
      const retried = await db.query<{ event_id: string }>(
        `SELECT * FROM webhook_record_and_claim(ARRAY[$4], ARRAY[$5], '{t}', '{200}', '{ok}', '{NULL}', '{1}',
           '{x}', $1, '{60}', '{bot_up}', '{t}', '{0}', 3, 6, $2, $3, 1, 10, '{}', 100)`,
        [now, until, 'tok-last', held.id, held.token],
      );
      expect(retried.map((r) => r.event_id)).toEqual([ids[1]]);
      // Settled deliveries leave the queue: only the one just claimed is left.
      const left = await db.query<{ delivery_id: string }>('SELECT delivery_id FROM webhook_queue');
      expect(left).toHaveLength(1);
    } finally {
      await drop();
    }
  });
});
