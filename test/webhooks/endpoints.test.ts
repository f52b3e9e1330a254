import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { deliveryOf, emit, Receiver } from './helpers.ts';

describe('messages, delivery log and manual retry', () => {
  let svc: TestService;
  let receiver: Receiver;
  let worker: DeliveryWorker;
  let down = true;

  beforeAll(async () => {
    svc = await createTestService();
    receiver = await new Receiver().start();
    receiver.respond = (_req, res) => {
      res.writeHead(down ? 500 : 204);
      res.end();
    };
    worker = new DeliveryWorker(svc.ctx);
  });
  afterAll(async () => {
    await worker.stop();
    await receiver.close();
    await svc.close();
  });

  async function setup() {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: receiver.url('/m') } });
    return { owner, bot };
  }

  describe('GET /api/v1/bot/messages and POST /api/v1/bot/messages/ack', () => {
    it('lists undelivered events oldest first with a limit; acked ones leave and are not sent', async () => {
      const { bot } = await setup();
      const ids = [];
      for (let i = 0; i < 4; i++) ids.push((await emit(svc, bot.bot_id, 'rails.updated', { i })).id);
      const page = await svc.app.inject({ url: '/api/v1/bot/messages?limit=3', headers: bot.auth });
      expect(page.statusCode).toBe(200);
      const body = page.json();
      expect(body.has_more).toBe(true);
      // wallet.activated (from the claim) first, then the events in order
      expect(body.messages.map((m: { event: string }) => m.event)).toEqual([
        'wallet.activated',
        'rails.updated',
        'rails.updated',
      ]);
      expect(body.messages[1]).toMatchObject({ id: ids[0], bot_id: bot.bot_id, data: { i: 0 } });

      const ack = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/messages/ack',
        headers: bot.auth,
        payload: { event_ids: [ids[0], ids[1], body.messages[0].id] },
      });
      expect(ack.statusCode).toBe(200);
      expect(ack.json().acknowledged).toHaveLength(3);
      expect(ack.json().not_found).toEqual([]);
      const status = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
      expect(status.json().pending_messages).toBe(2);
      const rest = await svc.app.inject({ url: '/api/v1/bot/messages', headers: bot.auth });
      expect(rest.json().messages.map((m: { id: string }) => m.id)).toEqual([ids[2], ids[3]]);
      expect((await deliveryOf(svc, ids[0]!)).status).toBe('acked');

      // Acked events are not delivered; the others are.
      down = false;
      const before = receiver.requests.length;
      await worker.runOnce();
      const sent = receiver.requests.slice(before).map((r) => JSON.parse(r.body).id);
      expect(sent).toContain(ids[2]);
      expect(sent).toContain(ids[3]);
      expect(sent).not.toContain(ids[0]);
      expect(sent).not.toContain(ids[1]);
      const empty = await svc.app.inject({ url: '/api/v1/bot/messages', headers: bot.auth });
      expect(empty.json()).toEqual({ messages: [], has_more: false });
      down = true;
    });

    it("another bot's event ids are reported as not_found and stay untouched; ack is idempotent", async () => {
      const a = await setup();
      const b = await setup();
      const foreign = await emit(svc, b.bot.bot_id);
      const own = await emit(svc, a.bot.bot_id);
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/messages/ack',
        headers: a.bot.auth,
        payload: { event_ids: [foreign.id, own.id, own.id, 'evt_unknownunknown'] },
      });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ acknowledged: [own.id], not_found: [foreign.id, 'evt_unknownunknown'] });
      const [row] = await svc.ctx.db.query<{ acked_at: Date | null }>(
        'SELECT acked_at FROM events WHERE id = $1',
        [foreign.id],
      );
      expect(row!.acked_at).toBeNull();
      const again = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/messages/ack',
        headers: a.bot.auth,
        payload: { event_ids: [own.id] },
      });
      expect(again.json()).toEqual({ acknowledged: [own.id], not_found: [] });
      // Another bot's queue never shows it.
      const list = await svc.app.inject({ url: '/api/v1/bot/messages?limit=200', headers: a.bot.auth });
      expect(list.json().messages.map((m: { id: string }) => m.id)).not.toContain(foreign.id);
    });

    it('rejects bad input with 400 and no key with 401', async () => {
      const { bot } = await setup();
      for (const payload of [{}, { event_ids: [] }, { event_ids: ['nope'] }, { event_ids: 'evt_x' }]) {
        const res = await svc.app.inject({
          method: 'POST',
          url: '/api/v1/bot/messages/ack',
          headers: bot.auth,
          payload,
        });
        expect(res.statusCode).toBe(400);
        expect(res.json().error).toBe('validation_error');
      }
      const tooMany = Array.from(
        { length: 201 },
        (_, i) => `evt_${'a'.repeat(10)}${i.toString(32).replace(/[0-1]/g, 'a')}`,
      );
      const big = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/messages/ack',
        headers: bot.auth,
        payload: { event_ids: tooMany },
      });
      expect(big.statusCode).toBe(400);
      const badLimit = await svc.app.inject({ url: '/api/v1/bot/messages?limit=abc', headers: bot.auth });
      expect(badLimit.statusCode).toBe(400);
      for (const [method, url] of [
        ['GET', '/api/v1/bot/messages'],
        ['POST', '/api/v1/bot/messages/ack'],
      ] as const) {
        const res = await svc.app.inject({
          method,
          url,
          payload: method === 'POST' ? { event_ids: [] } : undefined,
        });
        expect(res.statusCode).toBe(401);
        expect(res.json().error).toBe('Authentication required');
        const wrong = await svc.app.inject({
          method,
          url,
          headers: { authorization: `Bearer svc_live_${'0'.repeat(48)}` },
        });
        expect(wrong.statusCode).toBe(401);
      }
    });
  });

  describe('owner delivery log and manual retry', () => {
    it('lists deliveries with attempts, response and error; retries a failed one now', async () => {
      const { owner, bot } = await setup();
      down = true;
      const { id } = await emit(svc, bot.bot_id, 'wallet.frozen', { wallet_status: 'frozen' });
      // The first attempt and all five retries fail.
      await worker.runOnce();
      for (const delay of svc.ctx.config.webhookRetryDelaysSeconds) {
        svc.clock.advance(delay * 1000);
        await worker.runOnce();
      }
      const log = await svc.app.inject({
        url: `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries`,
        headers: owner.auth,
      });
      expect(log.statusCode).toBe(200);
      const entry = log.json().deliveries.find((d: { event_id: string }) => d.event_id === id);
      expect(entry).toMatchObject({
        event: 'wallet.frozen',
        status: 'failed',
        attempts: 6,
        response_status: 500,
        error: 'HTTP 500',
        next_attempt_at: null,
        delivered_at: null,
      });
      expect(entry.id).toMatch(/^whd_/);
      expect(typeof entry.last_attempt_at).toBe('string');
      const failedOnly = await svc.app.inject({
        url: `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries?status=failed&limit=1`,
        headers: owner.auth,
      });
      // The claim's wallet.activated failed too: two failed deliveries, one per page.
      expect(failedOnly.json().deliveries).toHaveLength(1);
      expect(failedOnly.json().deliveries[0].status).toBe('failed');
      expect(failedOnly.json().has_more).toBe(true);
      const pending = await svc.app.inject({
        url: `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries?status=pending`,
        headers: owner.auth,
      });
      expect(pending.json()).toEqual({ deliveries: [], has_more: false });

      down = false;
      const retry = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/webhook-deliveries/${entry.id}/retry`,
        headers: owner.auth,
      });
      expect(retry.statusCode).toBe(200);
      expect(retry.json().delivery).toMatchObject({ status: 'pending', attempts: 6 });
      expect(await worker.runOnce()).toBe(1);
      expect(await deliveryOf(svc, id)).toMatchObject({
        status: 'delivered',
        attempts: 7,
        response_status: 204,
      });
      const health = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
      expect(health.json()).toMatchObject({ webhook_status: 'active', webhook_fail_count: 0 });
      // A delivered one cannot be retried.
      const again = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/webhook-deliveries/${entry.id}/retry`,
        headers: owner.auth,
      });
      expect(again.statusCode).toBe(409);
      expect(again.json().error).toBe('conflict');
      const audit = await svc.app.inject({
        url: `/api/v1/owner/bots/${bot.bot_id}/audit-log`,
        headers: owner.auth,
      });
      expect(JSON.stringify(audit.json())).toContain('webhook_delivery.retried');
    });

    it('a failed manual retry leaves the delivery failed (one more attempt, no new schedule)', async () => {
      const { owner, bot } = await setup();
      down = true;
      const { id } = await emit(svc, bot.bot_id);
      await worker.runOnce();
      for (const delay of svc.ctx.config.webhookRetryDelaysSeconds) {
        svc.clock.advance(delay * 1000);
        await worker.runOnce();
      }
      const d = await deliveryOf(svc, id);
      const retry = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/webhook-deliveries/${d.id}/retry`,
        headers: owner.auth,
      });
      expect(retry.statusCode).toBe(200);
      await worker.runOnce();
      expect(await deliveryOf(svc, id)).toMatchObject({ status: 'failed', attempts: 7 });
    });

    it("another owner's bot or delivery is 404; no token is 401; a malformed id is 400", async () => {
      const { bot } = await setup();
      const stranger = await createOwner(svc);
      const { id } = await emit(svc, bot.bot_id);
      const d = await deliveryOf(svc, id);
      const log = await svc.app.inject({
        url: `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries`,
        headers: stranger.auth,
      });
      expect(log.statusCode).toBe(404);
      expect(log.json().error).toBe('not_found');
      const retry = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/webhook-deliveries/${d.id}/retry`,
        headers: stranger.auth,
      });
      expect(retry.statusCode).toBe(404);
      expect((await deliveryOf(svc, id)).status).toBe('pending');
      const unknown = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/webhook-deliveries/whd_unknownunknown/retry',
        headers: stranger.auth,
      });
      expect(unknown.statusCode).toBe(404);
      for (const [method, url] of [
        ['GET', `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries`],
        ['POST', `/api/v1/owner/webhook-deliveries/${d.id}/retry`],
      ] as const) {
        const res = await svc.app.inject({ method, url });
        expect(res.statusCode).toBe(401);
      }
      const bad = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/webhook-deliveries/evt_notadelivery/retry',
        headers: stranger.auth,
      });
      expect(bad.statusCode).toBe(400);
      const badStatus = await svc.app.inject({
        url: `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries?status=nope`,
        headers: stranger.auth,
      });
      expect(badStatus.statusCode).toBe(400);
    });

    it('every route is in /openapi.json', async () => {
      const doc = (await svc.app.inject({ url: '/openapi.json' })).json();
      expect(Object.keys(doc.paths)).toEqual(
        expect.arrayContaining([
          '/api/v1/bot/messages',
          '/api/v1/bot/messages/ack',
          '/api/v1/owner/bots/{bot_id}/webhook-deliveries',
          '/api/v1/owner/webhook-deliveries/{delivery_id}/retry',
        ]),
      );
    });
  });
});

// The message queue is read from the delivery side (migration 0052): a delivery does not write its
// event, so the recording call itself announces the bots whose deliveries arrived. The status is
// cached for a minute here: a count that follows a delivery at once was invalidated by that.
describe('the message queue follows each delivery, and the cached status count with it', () => {
  let svc: TestService;
  let receiver: Receiver;
  let worker: DeliveryWorker;
  let down = true;

  beforeAll(async () => {
    svc = await createTestService({ env: { STATUS_CACHE_MS: '60000' } });
    receiver = await new Receiver().start();
    receiver.respond = (_req, res) => {
      res.writeHead(down ? 500 : 204);
      res.end();
    };
    worker = new DeliveryWorker(svc.ctx);
  });
  afterAll(async () => {
    await worker.stop();
    await receiver.close();
    await svc.close();
  });

  it('pending and failed events are listed, a delivered one leaves, a retried one stays until it arrives', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: receiver.url('/q') } });
    const listed = async () =>
      (await svc.app.inject({ url: '/api/v1/bot/messages', headers: bot.auth }))
        .json()
        .messages.map((m: { event: string; id: string }) => m.id);
    const pendingCount = async () =>
      (await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).json().pending_messages;
    const [activated] = await listed();
    // a fails for good (with the claim's wallet.activated): every attempt answered 500.
    down = true;
    const a = await emit(svc, bot.bot_id, 'rails.updated', { i: 0 });
    await worker.runOnce();
    for (const delay of svc.ctx.config.webhookRetryDelaysSeconds) {
      svc.clock.advance(delay * 1000);
      await worker.runOnce();
    }
    expect(await deliveryOf(svc, a.id)).toMatchObject({ status: 'failed' });
    const b = await emit(svc, bot.bot_id, 'rails.updated', { i: 1 });
    expect(await listed()).toEqual([activated, a.id, b.id]);
    expect(await pendingCount()).toBe(3);

    // b arrives: it leaves the queue, and the cached count follows without waiting for its expiry.
    down = false;
    expect(await worker.runOnce()).toBe(1);
    expect(await deliveryOf(svc, b.id)).toMatchObject({ status: 'delivered' });
    expect(await listed()).toEqual([activated, a.id]);
    expect(await pendingCount()).toBe(2);

    // An owner's retry of a: still listed (pending now), once; listed no more when it arrives.
    const d = await deliveryOf(svc, a.id);
    const retry = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/webhook-deliveries/${d.id}/retry`,
      headers: owner.auth,
    });
    expect(retry.statusCode).toBe(200);
    expect(await listed()).toEqual([activated, a.id]);
    const [flag] = await svc.ctx.db.query<{ failed_at: Date | null }>(
      'SELECT failed_at FROM webhook_deliveries WHERE id = $1',
      [d.id],
    );
    expect(flag!.failed_at).toBeNull();
    expect(await worker.runOnce()).toBe(1);
    expect(await listed()).toEqual([activated]);
    expect(await pendingCount()).toBe(1);

    // Acknowledged: the failed wallet.activated leaves too.
    const ack = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bot/messages/ack',
      headers: bot.auth,
      payload: { event_ids: [activated] },
    });
    expect(ack.json().acknowledged).toEqual([activated]);
    expect(await listed()).toEqual([]);
    expect(await pendingCount()).toBe(0);
    // The event rows were not written by the deliveries.
    const events = await svc.ctx.db.query<{ delivered_at: Date | null }>(
      'SELECT delivered_at FROM events WHERE id = ANY($1)',
      [[a.id, b.id]],
    );
    expect(events).toEqual([{ delivered_at: null }, { delivered_at: null }]);
  });
});
