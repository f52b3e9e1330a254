import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ackMessages } from '../../src/webhooks/service.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { backlog, emit, Receiver } from './helpers.ts';

// A bot at its in-flight bound with a backlog older than everyone else's (its receiver hangs, or is
// slower than its events) must not make every claim walk past that backlog (migration 0058,
// webhook_park.sql): before, each claim read all of its due rows one by one (6 ms per claim at
// 1,000 rows, 24 ms at 50,000, on PostgreSQL). The worker holds such a bot's due rows back beyond
// its next 2 × bound, and brings them back in event order as its slots free up. What a user can
// observe: other bots are served while it hangs, and once it answers again every delivery arrives
// once, in the order of its events, the ones written while its backlog was held included.
// The bound here is 1 (one request at a time), so arrival order is send order.

const BACKLOG = 300;
const PER_BOT = 1;
const KEEP = 2 * PER_BOT;

describe('a bot’s webhook backlog is held back while the bot is at its bound', () => {
  let svc: TestService;
  let receiver: Receiver;
  const hanging: ServerResponse[] = [];
  let hang = true;

  beforeAll(async () => {
    svc = await createTestService({ env: { WEBHOOK_TIMEOUT_MS: '60000', WEBHOOK_RETRY_DELAYS: '3600' } });
    receiver = await new Receiver().start();
    receiver.respond = (req, res) => {
      if (req.url.startsWith('/hang') && hang) {
        hanging.push(res);
        return;
      }
      res.writeHead(200);
      res.end('ok');
    };
  });
  afterAll(async () => {
    hang = false;
    for (const res of hanging.splice(0)) res.destroy();
    await receiver.close();
    await svc.close();
  });

  async function bot(path: string): Promise<string> {
    const owner = await createOwner(svc);
    return (await activeBot(svc, owner, { body: { callback_url: receiver.url(path) } })).bot_id;
  }

  /** The bot's queue rows as the claim sees them. */
  async function queueOf(botId: string) {
    const rows = await svc.ctx.db.query<{ leased: number; ready: number; held: number; waiting: number }>(
      `SELECT count(*) FILTER (WHERE lock_token IS NOT NULL)::int AS leased,
              count(*) FILTER (WHERE lock_token IS NULL AND held_due_at IS NULL AND due_at <= $2)::int AS ready,
              count(*) FILTER (WHERE held_due_at IS NOT NULL)::int AS held,
              count(*)::int AS waiting
         FROM webhook_queue WHERE bot_id = $1`,
      [botId, new Date(svc.clock.now())],
    );
    return rows[0]!;
  }

  /** The bot's events in the order they were written (the order its deliveries must arrive in). */
  async function eventOrder(botId: string): Promise<string[]> {
    const rows = await svc.ctx.db.query<{ id: string }>(
      'SELECT id FROM events WHERE bot_id = $1 ORDER BY seq',
      [botId],
    );
    return rows.map((r) => r.id);
  }

  const arrivedFor = (path: string) =>
    receiver.requests.filter((r) => r.url === path).map((r) => String(r.headers['x-service-event-id']));

  it('holds the backlog, serves other bots meanwhile, and delivers it all once, in event order, when the receiver answers again', {
    timeout: 90_000,
  }, async () => {
    const stuck = await bot('/hang-a');
    const healthy = await bot('/ok-a');
    await backlog(svc, stuck, BACKLOG);
    const worker = new DeliveryWorker(svc.ctx, { pollMs: 50, perBotInFlight: PER_BOT });
    await worker.start();
    try {
      await receiver.waitFor(() => hanging.length === 1, 15_000);
      // The backlog and the events of the bot's activation.
      const { waiting } = await queueOf(stuck);
      expect(waiting).toBeGreaterThan(BACKLOG);
      // The bot is at its bound: everything after its next KEEP rows is held.
      const parked = await worker.park();
      expect(parked).toEqual({ held: waiting - PER_BOT - KEEP, released: 0 });
      expect(await queueOf(stuck)).toEqual({
        leased: 1,
        ready: KEEP,
        held: waiting - PER_BOT - KEEP,
        waiting,
      });
      // A second call finds nothing more to do.
      expect(await worker.park()).toEqual({ held: 0, released: 0 });
      // Operators see it in /metrics.
      const metrics = await svc.app.inject({ url: '/metrics' });
      expect(Number(/^botpay_webhook_deliveries_held (\d+)$/m.exec(metrics.body)?.[1])).toBe(
        waiting - PER_BOT - KEEP,
      );

      // Events written while the backlog is held come after it: they wait (not sent before the
      // held ones), and the next call holds them too.
      const later = [];
      for (let i = 0; i < 3; i++) later.push((await emit(svc, stuck)).id);
      const served = (await emit(svc, healthy)).id;
      await receiver.waitFor(() => arrivedFor('/ok-a').includes(served), 15_000);
      expect(await worker.park()).toEqual({ held: 3, released: 0 });
      expect(await queueOf(stuck)).toMatchObject({
        leased: 1,
        ready: KEEP,
        held: waiting - PER_BOT - KEEP + 3,
      });
      expect(hanging).toHaveLength(1);
      // And events written after that call are not held yet, but must not go before the held rows.
      for (let i = 0; i < 2; i++) later.push((await emit(svc, stuck)).id);

      // The receiver answers again: everything arrives, once each, in the order of the events.
      hang = false;
      const first = hanging.splice(0);
      for (const res of first) {
        res.writeHead(200);
        res.end('ok');
      }
      const expected = await eventOrder(stuck);
      expect(expected).toHaveLength(waiting + later.length);
      expect(expected.slice(-later.length)).toEqual(later);
      await receiver.waitFor(() => arrivedFor('/hang-a').length >= expected.length, 60_000);
      expect(arrivedFor('/hang-a')).toEqual(expected);
      await worker.stop(); // (again in finally: stopping twice is harmless)
      expect(await queueOf(stuck)).toEqual({ leased: 0, ready: 0, held: 0, waiting: 0 });
      const delivered = await svc.ctx.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM webhook_deliveries WHERE bot_id = $1 AND status = 'delivered' AND attempts = 1`,
        [stuck],
      );
      expect(delivered[0]!.n).toBe(expected.length);
    } finally {
      hang = true;
      await worker.stop();
    }
  });

  it('rows acknowledged by the bot itself free its slots: the periodic call brings held rows back, and nothing goes before them', {
    timeout: 60_000,
  }, async () => {
    const stuck = await bot('/hang-b');
    await backlog(svc, stuck, 40);
    const worker = new DeliveryWorker(svc.ctx, { pollMs: 50, perBotInFlight: PER_BOT });
    await worker.start();
    const order = await eventOrder(stuck);
    let later = '';
    try {
      await receiver.waitFor(() => hanging.length === 1, 15_000);
      const { waiting } = await queueOf(stuck);
      expect(await worker.park()).toEqual({ held: waiting - PER_BOT - KEEP, released: 0 });
      // A held delivery whose due time another writer changes (an owner's retry, a tunnel's first
      // connection: the trigger webhook_queue_sync) stays held, with its new due time kept for later.
      const heldId = `whd_${order[order.length - 1]!.slice(4)}`;
      const retryAt = new Date(svc.clock.now() - 5_000);
      await svc.ctx.db.query('UPDATE webhook_deliveries SET next_attempt_at = $2 WHERE id = $1', [
        heldId,
        retryAt,
      ]);
      const [heldRow] = await svc.ctx.db.query<{ out: boolean; held_due_at: Date | null }>(
        `SELECT due_at = 'infinity' AS out, held_due_at FROM webhook_queue WHERE delivery_id = $1`,
        [heldId],
      );
      expect(heldRow!.out).toBe(true);
      expect(new Date(heldRow!.held_due_at!).getTime()).toBe(retryAt.getTime());
      // The bot reads its message queue and acknowledges the first three (the one out included):
      // no recording call follows for them, and nothing of the bot is ready any more but an event
      // written now, which comes after the held rows.
      const acked = await ackMessages(svc.ctx, stuck, order.slice(0, 3));
      expect(acked.acknowledged).toEqual(order.slice(0, 3));
      later = (await emit(svc, stuck)).id;
      expect(await queueOf(stuck)).toMatchObject({ leased: 0, ready: 1, held: waiting - PER_BOT - KEEP });
    } finally {
      // The acknowledged send still out ends (its result finds no lease: nothing is recorded).
      for (const res of hanging.splice(0)) {
        res.writeHead(200);
        res.end('ok');
      }
      await worker.stop();
    }
    hang = false;
    try {
      // Another instance: the event written after the held rows may not go before them.
      const next = new DeliveryWorker(svc.ctx, { perBotInFlight: PER_BOT });
      expect(await next.runOnce()).toBe(0);
      // The periodic call brings the held rows back; the earliest goes next.
      expect(await next.park()).toEqual({ held: 0, released: KEEP });
      expect(await next.runOnce()).toBe(1);
      await next.stop();
      expect(arrivedFor('/hang-b')).toEqual([order[0], order[3]]);
      expect(arrivedFor('/hang-b')).not.toContain(later);
    } finally {
      hang = true;
    }
  });
});
