import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UNREACHABLE_AFTER } from '../../src/webhooks/health.ts';
import { TUNNEL_NOT_CONNECTED } from '../../src/webhooks/sender.ts';
import { parkUntilTunnel, TUNNEL_WAIT_SENTINEL, tunnelConnected } from '../../src/webhooks/tunnelWait.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { connectionFor, isPostgres } from '../support/db.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { emit, healthOf, LoopbackRelay, Receiver } from './helpers.ts';

// A managed-tunnel bot whose tunnel client has never connected is waiting for it, not failing:
// its deliveries wait (no attempt, no failure counted, webhook_status stays `pending`) and go out,
// in order, once the client connects; the tunnel hostname is never resolved through DNS. After
// that first connection, a tunnel that is down again is an ordinary failed attempt.
describe("deliveries wait for a tunnel bot's first connection", () => {
  let svc: TestService;
  let receiver: Receiver;
  let relay: LoopbackRelay;
  let worker: DeliveryWorker;
  const lookups: string[] = [];

  beforeAll(async () => {
    svc = await createTestService();
    receiver = await new Receiver().start();
    relay = new LoopbackRelay(receiver);
    svc.ctx.tunnelRelay = relay;
    // Every DNS lookup the worker would make goes through this resolver: none may happen.
    worker = new DeliveryWorker(svc.ctx, {
      resolver: async (hostname) => {
        lookups.push(hostname);
        throw Object.assign(new Error(`lookup of ${hostname}`), { code: 'ENOTFOUND' });
      },
    });
  });
  afterAll(async () => {
    await worker.stop();
    await receiver.close();
    await svc.close();
  });

  async function tunnelBot() {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: undefined, bot_type: 'helper' } });
    const [row] = await svc.ctx.db.query<{ tunnel_hostname: string }>(
      'SELECT tunnel_hostname FROM bots WHERE id = $1',
      [bot.bot_id],
    );
    return { ...bot, owner, hostname: row!.tunnel_hostname };
  }

  const deliveries = (botId: string) =>
    svc.ctx.db.query<{
      id: string;
      status: string;
      attempts: number;
      next_attempt_at: Date;
      error: string | null;
    }>(
      'SELECT id, status, attempts, next_attempt_at, error FROM webhook_deliveries WHERE bot_id = $1 ORDER BY id',
      [botId],
    );

  it('waits calmly, then delivers everything in order once the client connects', async () => {
    const bot = await tunnelBot();
    // The claim's own events (wallet.activated…) and more than a whole retry cycle of new ones.
    for (let i = 0; i < UNREACHABLE_AFTER + 2; i++) {
      await emit(svc, bot.bot_id, 'wallet.funded', { amount_usd: i });
      await worker.runOnce();
    }
    const waiting = await deliveries(bot.bot_id);
    expect(waiting.length).toBeGreaterThan(UNREACHABLE_AFTER);
    for (const d of waiting) {
      expect(d).toMatchObject({ status: 'pending', attempts: 0, error: null });
      expect(d.next_attempt_at.getTime()).toBe(TUNNEL_WAIT_SENTINEL.getTime());
    }
    expect(await healthOf(svc, bot.bot_id)).toEqual({ webhook_status: 'pending', webhook_fail_count: 0 });
    expect(lookups).toEqual([]);
    expect(await worker.runOnce(), 'a waiting delivery is not claimed again').toBe(0);

    // The owner API and the bot's status say the same calm thing.
    const list = await svc.app.inject({
      url: `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries`,
      headers: bot.owner.auth,
    });
    expect(list.statusCode).toBe(200);
    for (const d of list.json().deliveries) {
      expect(d).toMatchObject({
        status: 'pending',
        waiting_for_tunnel: true,
        next_attempt_at: null,
        error: null,
      });
    }
    const detail = await svc.app.inject({ url: `/api/v1/owner/bots/${bot.bot_id}`, headers: bot.owner.auth });
    expect(detail.json().webhook).toMatchObject({
      status: 'pending',
      fail_count: 0,
      waiting_for_tunnel: true,
    });
    const status = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    expect(status.json()).toMatchObject({ webhook_status: 'pending', webhook_fail_count: 0 });

    // The client connects: every waiting delivery is due again at its creation time (so the claim
    // takes them in their order, before anything newer), and goes out.
    relay.connected.add(bot.hostname);
    expect(await tunnelConnected(svc.ctx, bot.bot_id)).toBe(waiting.length);
    const due = await svc.ctx.db.query<{ next_attempt_at: Date; created_at: Date }>(
      'SELECT next_attempt_at, created_at FROM webhook_deliveries WHERE bot_id = $1',
      [bot.bot_id],
    );
    for (const d of due) expect(d.next_attempt_at.getTime()).toBe(d.created_at.getTime());
    const before = receiver.requests.length;
    while ((await worker.runOnce()) > 0);
    const got = receiver.requests.slice(before).map((r) => JSON.parse(r.body).id as string);
    expect(got.sort()).toEqual(waiting.map((d) => d.id.replace(/^whd_/, 'evt_')).sort());
    expect((await deliveries(bot.bot_id)).every((d) => d.status === 'delivered')).toBe(true);
    expect(await healthOf(svc, bot.bot_id)).toEqual({ webhook_status: 'active', webhook_fail_count: 0 });
    const after = await svc.app.inject({ url: `/api/v1/owner/bots/${bot.bot_id}`, headers: bot.owner.auth });
    expect(after.json().webhook.waiting_for_tunnel).toBe(false);

    // Down again after having worked: an ordinary failure, named as such (never a DNS error).
    relay.connected.delete(bot.hostname);
    const { id } = await emit(svc, bot.bot_id);
    expect(await worker.runOnce()).toBe(1);
    const [failed] = await svc.ctx.db.query<{ attempts: number; error: string; target: string }>(
      'SELECT attempts, error, target FROM webhook_deliveries WHERE event_id = $1',
      [id],
    );
    expect(failed).toEqual({ attempts: 1, error: TUNNEL_NOT_CONNECTED, target: `relay:${bot.hostname}` });
    expect(await healthOf(svc, bot.bot_id)).toEqual({ webhook_status: 'active', webhook_fail_count: 1 });
    expect(lookups).toEqual([]);
  });

  it('a manual retry of a waiting delivery waits again rather than failing', async () => {
    const bot = await tunnelBot();
    const { id } = await emit(svc, bot.bot_id);
    while ((await worker.runOnce()) > 0);
    const [d] = await svc.ctx.db.query<{ id: string }>(
      'SELECT id FROM webhook_deliveries WHERE event_id = $1',
      [id],
    );
    const retry = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/webhook-deliveries/${d!.id}/retry`,
      headers: { ...bot.owner.auth, 'idempotency-key': `retry-${d!.id}` },
    });
    expect(retry.statusCode).toBeLessThan(300);
    expect(await worker.runOnce()).toBeGreaterThanOrEqual(1);
    const [again] = await deliveries(bot.bot_id).then((rows) => rows.filter((r) => r.id === d!.id));
    expect(again).toMatchObject({ status: 'pending', attempts: 0 });
    expect(again!.next_attempt_at.getTime()).toBe(TUNNEL_WAIT_SENTINEL.getTime());
    expect(await healthOf(svc, bot.bot_id)).toEqual({ webhook_status: 'pending', webhook_fail_count: 0 });
  });
});

// The race between parking a delivery and the client's first connection, on two real sessions:
// the connection holds the bot row; the park waits for it, sees the connection and does not park,
// so no delivery is left waiting for a connection that already happened.
describe.runIf(isPostgres)('parking and the first connection at the same moment', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('a park that waited for the connecting transaction does not park', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: undefined, bot_type: 'helper' } });
    const { id } = await emit(svc, bot.bot_id);
    await svc.ctx.db.query(
      `UPDATE webhook_queue SET lock_token = 'tok', locked_until = now() + interval '1 minute'
        WHERE delivery_id = (SELECT id FROM webhook_deliveries WHERE event_id = $1)`,
      [id],
    );
    const [d] = await svc.ctx.db.query<{ id: string }>(
      'SELECT id FROM webhook_deliveries WHERE event_id = $1',
      [id],
    );
    const connecting = new pg.Client({ connectionString: connectionFor(svc.database.schema!) });
    await connecting.connect();
    try {
      await connecting.query('BEGIN');
      await connecting.query('UPDATE bots SET tunnel_connected_at = now() WHERE id = $1', [bot.bot_id]);
      const park = parkUntilTunnel(svc.ctx.db, d!.id, 'tok', bot.bot_id);
      await new Promise((r) => setTimeout(r, 200));
      await connecting.query('COMMIT');
      expect(await park).toBe(false);
      // The lease is still held (queue row, 0046) and nothing is parked, on either row.
      const [row] = await svc.ctx.db.query<{
        next_attempt_at: Date;
        due_at: Date;
        lock_token: string | null;
      }>(
        `SELECT d.next_attempt_at, q.due_at, q.lock_token
           FROM webhook_deliveries d JOIN webhook_queue q ON q.delivery_id = d.id WHERE d.id = $1`,
        [d!.id],
      );
      expect(row!.lock_token).toBe('tok');
      expect(row!.next_attempt_at.getTime()).toBeLessThan(TUNNEL_WAIT_SENTINEL.getTime());
      expect(row!.due_at.getTime()).toBeLessThan(TUNNEL_WAIT_SENTINEL.getTime());
    } finally {
      await connecting.end();
    }
  });
});
