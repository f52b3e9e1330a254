import { verify } from '@octokit/webhooks-methods';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { createOwner, createTestService } from '../support/service.ts';
import { listen, registerTunnelBot, startClient, startReceiver, until } from './helpers.ts';

// End to end on loopback: the delivery worker → the relay in the service → the tunnel client →
// a local receiver, with the real signature and the hooks token, across a service restart.
describe('webhooks delivered through the managed tunnel', () => {
  let database: TestDatabase;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    database = await createTestDatabase();
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await receiver.close();
    await database.drop();
  });

  it('a primary bot receives a signed wallet.funded with its hooks token; health goes pending → active; deliveries resume after a restart', async () => {
    const first = await createTestService({ database });
    const port = await listen(first);
    const bot = await registerTunnelBot(first, receiver.port, { bot_type: 'primary' });
    const owner = await createOwner(first);
    const { client } = startClient({
      server: `http://127.0.0.1:${port}`,
      token: bot.tunnel_token,
      port: receiver.port,
    });
    try {
      await client.waitConnected();
      const status = async (svc: typeof first) =>
        (
          await svc.app.inject({
            url: '/api/v1/bot/status',
            headers: { authorization: `Bearer ${bot.api_key}` },
          })
        ).json();

      await first.app.inject({
        method: 'POST',
        url: '/api/v1/owner/claims',
        headers: owner.auth,
        payload: { claim_token: bot.claim_token },
      });
      expect((await status(first)).webhook_status).toBe('pending');
      await first.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
        headers: owner.auth,
        payload: { amount_cents: 2500 },
      });

      const worker = new DeliveryWorker(first.ctx);
      await worker.runOnce();
      const funded = receiver.received.find((r) => r.headers['x-service-event'] === 'wallet.funded');
      expect(funded, 'wallet.funded reached the receiver').toBeDefined();
      expect(funded!.method).toBe('POST');
      expect(funded!.url).toBe(bot.webhook_path);
      expect(funded!.headers['content-type']).toBe('application/json');
      expect(funded!.headers.authorization).toBe(`Bearer ${bot.primary_hooks_token}`);
      const signature = String(funded!.headers['x-service-signature']);
      expect(await verify(bot.webhook_secret, funded!.body.toString('utf8'), signature)).toBe(true);
      const body = JSON.parse(funded!.body.toString('utf8'));
      expect(body).toMatchObject({ event: 'wallet.funded', bot_id: bot.bot_id, data: { amount: 25 } });
      expect(funded!.headers['x-service-event-id']).toBe(body.id);
      expect(receiver.received.some((r) => r.headers['x-service-event'] === 'wallet.activated')).toBe(true);

      const after = await status(first);
      expect(after.webhook_status).toBe('active');
      expect(after.pending_messages).toBe(0);
      await worker.stop();

      // Restart the service on the same port and database: the client reconnects and the next
      // event (a freeze) arrives through it.
      await first.close();
      const second = await createTestService({ database });
      try {
        await listen(second, port);
        await until(() => client.connections >= 2, 10_000);
        await second.app.inject({
          method: 'POST',
          url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
          headers: owner.auth,
        });
        const worker2 = new DeliveryWorker(second.ctx);
        await worker2.runOnce();
        await worker2.stop();
        const frozen = receiver.received.find((r) => r.headers['x-service-event'] === 'wallet.frozen');
        expect(frozen).toBeDefined();
        expect(
          await verify(
            bot.webhook_secret,
            frozen!.body.toString('utf8'),
            String(frozen!.headers['x-service-signature']),
          ),
        ).toBe(true);
        // Freezing the wallet did not cut the tunnel.
        expect(client.connected).toBe(true);
      } finally {
        await second.close();
      }
    } finally {
      await client.stop();
    }
  });

  it('a non-primary tunnel bot gets signature and event headers but no Authorization', async () => {
    const svc = await createTestService({ database });
    try {
      const port = await listen(svc);
      const bot = await registerTunnelBot(svc, receiver.port, { bot_type: 'custom', webhook_path: '/in' });
      expect(bot.primary_hooks_token).toBeUndefined();
      const owner = await createOwner(svc);
      const { client } = startClient({
        server: `http://127.0.0.1:${port}`,
        token: bot.tunnel_token,
        port: receiver.port,
      });
      try {
        await client.waitConnected();
        await svc.app.inject({
          method: 'POST',
          url: '/api/v1/owner/claims',
          headers: owner.auth,
          payload: { claim_token: bot.claim_token },
        });
        const worker = new DeliveryWorker(svc.ctx);
        await worker.runOnce();
        await worker.stop();
        const got = receiver.received.find(
          (r) => r.url === '/in' && JSON.parse(r.body.toString()).bot_id === bot.bot_id,
        );
        expect(got).toBeDefined();
        expect(got!.headers.authorization).toBeUndefined();
        expect(got!.headers['x-service-event']).toBe('wallet.activated');
        expect(
          await verify(
            bot.webhook_secret,
            got!.body.toString('utf8'),
            String(got!.headers['x-service-signature']),
          ),
        ).toBe(true);
      } finally {
        await client.stop();
      }
    } finally {
      await svc.close();
    }
  });
  it("events before the tunnel client's first connection wait for it, then arrive with no failed attempt", async () => {
    const svc = await createTestService({ database });
    const worker = new DeliveryWorker(svc.ctx);
    try {
      const port = await listen(svc);
      const bot = await registerTunnelBot(svc, receiver.port, { bot_type: 'custom', webhook_path: '/later' });
      const owner = await createOwner(svc);
      await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/claims',
        headers: owner.auth,
        payload: { claim_token: bot.claim_token },
      });
      await worker.start();
      const waiting = async () =>
        (
          await svc.app.inject({
            url: `/api/v1/owner/bots/${bot.bot_id}/webhook-deliveries`,
            headers: owner.auth,
          })
        ).json().deliveries as Array<{ waiting_for_tunnel: boolean; attempts: number; status: string }>;
      await until(async () => (await waiting()).some((d) => d.waiting_for_tunnel));
      expect((await waiting()).every((d) => d.waiting_for_tunnel && d.attempts === 0)).toBe(true);

      const { client } = startClient({
        server: `http://127.0.0.1:${port}`,
        token: bot.tunnel_token,
        port: receiver.port,
      });
      try {
        await client.waitConnected();
        // Woken by the connection (NOTIFY), not by a retry's delay.
        await until(() =>
          receiver.received.some(
            (r) => r.url === '/later' && JSON.parse(r.body.toString()).bot_id === bot.bot_id,
          ),
        );
        // Recorded, not only sent: the receiver has the request before the worker writes its result
        // (and the bot's health) in the same call that leaves the queue.
        await until(async () =>
          (await waiting()).every((d) => !d.waiting_for_tunnel && d.status === 'delivered'),
        );
        const [health] = await svc.ctx.db.query<{ webhook_status: string; webhook_fail_count: number }>(
          'SELECT webhook_status, webhook_fail_count FROM bots WHERE id = $1',
          [bot.bot_id],
        );
        expect(health).toEqual({ webhook_status: 'active', webhook_fail_count: 0 });
        const attempts = await svc.ctx.db.query<{ ok: boolean }>(
          'SELECT a.ok FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.bot_id = $1',
          [bot.bot_id],
        );
        expect(attempts.length).toBeGreaterThan(0);
        expect(attempts.every((a) => a.ok)).toBe(true);
      } finally {
        await client.stop();
      }
    } finally {
      await worker.stop();
      await svc.close();
    }
  });
});
