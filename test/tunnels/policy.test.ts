import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TunnelClient } from '../../src/tunnels/client.ts';
import type { TunnelRelay } from '../../src/tunnels/relay.ts';
import { activeBot, createOwner, type TestOwner, type TestService } from '../support/service.ts';
import { hostRequest, startClient, type startReceiver, startRelayService } from './helpers.ts';

// Issue 14 item 5: by default the tunnel forwards only POST to the bot's webhook path. Anyone who
// knows (or guesses) a bot's hostname could otherwise reach every route of every service on the
// bot's local port — an admin page, a debug endpoint. Other paths are 404, other methods on the
// webhook path 405, and none of them reaches the bot's receiver; the owner can allow everything
// (PATCH /api/v1/owner/bots/{bot_id}/tunnel {"forward": "all"}) and take it back.

describe('what the tunnel forwards', () => {
  let svc: TestService;
  let port: number;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let owner: TestOwner;
  const clients: TunnelClient[] = [];

  let close: () => Promise<void>;

  beforeAll(async () => {
    ({ svc, port, receiver, close } = await startRelayService({ LOG_LEVEL: 'silent' }));
    owner = await createOwner(svc);
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.stop()));
  });
  afterAll(() => close());

  const relay = () => svc.ctx.tunnelRelay as TunnelRelay;

  async function tunnelBot(body: Record<string, unknown> = {}) {
    const bot = (await activeBot(svc, owner, {
      body: { callback_url: undefined, local_port: receiver.port, bot_type: 'custom', ...body },
    })) as Awaited<ReturnType<typeof activeBot>> & { webhook_url: string; tunnel_token: string };
    const started = startClient({
      server: `http://127.0.0.1:${port}`,
      token: bot.tunnel_token,
      port: receiver.port,
    });
    clients.push(started.client);
    await started.client.waitConnected();
    return { ...bot, hostname: new URL(bot.webhook_url).hostname };
  }

  const patch = (botId: string, payload: unknown, auth = owner.auth) =>
    svc.app.inject({
      method: 'PATCH',
      url: `/api/v1/owner/bots/${botId}/tunnel`,
      headers: auth,
      payload: payload as object,
    });

  it('by default: GET /, POST /other, PUT and GET on the webhook path are refused and never reach the bot', async () => {
    const bot = await tunnelBot({ webhook_path: '/in' });
    const before = receiver.received.length;
    const refused: Array<[string, string, number, string]> = [
      ['GET', '/', 404, 'not_found'],
      ['POST', '/other', 404, 'not_found'],
      ['POST', '/admin', 404, 'not_found'],
      ['POST', '/in/', 404, 'not_found'],
      ['POST', '/IN', 404, 'not_found'],
      ['POST', '//in', 404, 'not_found'],
      ['POST', '/in/../admin', 404, 'not_found'],
      ['POST', '/%69n', 404, 'not_found'],
      ['PUT', '/in', 405, 'method_not_allowed'],
      ['GET', '/in', 405, 'method_not_allowed'],
      ['DELETE', '/in?x=1', 405, 'method_not_allowed'],
      ['OPTIONS', '/in', 405, 'method_not_allowed'],
    ];
    for (const [method, path, status, code] of refused) {
      const res = await hostRequest(port, bot.hostname, {
        method,
        path,
        body: method === 'GET' ? undefined : 'x',
      });
      expect(res.status, `${method} ${path}`).toBe(status);
      expect(JSON.parse(res.body.toString()), `${method} ${path}`).toEqual({
        error: code,
        message: "The tunnel forwards only POST /in (the bot's owner can allow more).",
      });
      if (status === 405) expect(res.headers.allow).toBe('POST');
    }
    // Through inject() (requests that reach Fastify's hooks) the same.
    const injected = await svc.app.inject({ method: 'GET', url: '/', headers: { host: bot.hostname } });
    expect(injected.statusCode).toBe(404);
    expect(injected.json().error).toBe('not_found');
    expect(receiver.received.length).toBe(before);

    // The webhook itself (with or without a query string) passes.
    const ok = await hostRequest(port, bot.hostname, { method: 'POST', path: '/in', body: 'event' });
    expect(ok.status).toBe(200);
    expect(ok.body.toString()).toBe('event');
    expect(
      (await hostRequest(port, bot.hostname, { method: 'POST', path: '/in?x=1', body: 'q' })).status,
    ).toBe(200);
    expect(receiver.received.slice(before).map((r) => `${r.method} ${r.url}`)).toEqual([
      'POST /in',
      'POST /in?x=1',
    ]);
  });

  it('the owner allows everything and takes it back; the connected tunnel follows at once', async () => {
    const bot = await tunnelBot();
    const get = await svc.app.inject({ url: `/api/v1/owner/bots/${bot.bot_id}/tunnel`, headers: owner.auth });
    expect(get.statusCode).toBe(200);
    expect(get.json()).toEqual({
      bot_id: bot.bot_id,
      webhook_url: bot.webhook_url,
      webhook_path: '/webhook',
      local_port: receiver.port,
      forward: 'webhook_only',
    });
    expect((await hostRequest(port, bot.hostname, { path: '/status-page' })).status).toBe(404);

    const all = await patch(bot.bot_id, { forward: 'all' });
    expect(all.statusCode, all.body).toBe(200);
    expect(all.json().forward).toBe('all');
    const through = await hostRequest(port, bot.hostname, { method: 'GET', path: '/status-page' });
    expect(through.status).toBe(200);
    expect(through.body.toString()).toBe('GET /status-page');
    expect(
      (await hostRequest(port, bot.hostname, { method: 'PUT', path: '/webhook', body: 'p' })).status,
    ).toBe(200);

    expect((await patch(bot.bot_id, { forward: 'webhook_only' })).statusCode).toBe(200);
    expect((await hostRequest(port, bot.hostname, { path: '/status-page' })).status).toBe(404);

    const audit = await svc.ctx.db.query<{ action: string; details: unknown }>(
      "SELECT action, details FROM audit_log WHERE bot_id = $1 AND action = 'tunnel.forward_changed' ORDER BY id",
      [bot.bot_id],
    );
    expect(audit.map((a) => a.details)).toEqual([
      { from: 'webhook_only', to: 'all' },
      { from: 'all', to: 'webhook_only' },
    ]);
  });

  it('a change made through another instance reaches this relay at its next revalidation', async () => {
    const bot = await tunnelBot();
    // As another instance's owner API would: the row changes, this relay was not told.
    await svc.ctx.db.query("UPDATE bots SET tunnel_forward = 'all' WHERE id = $1", [bot.bot_id]);
    expect((await hostRequest(port, bot.hostname, { path: '/elsewhere' })).status).toBe(404);
    await relay().revalidate();
    expect((await hostRequest(port, bot.hostname, { path: '/elsewhere' })).status).toBe(200);
  });

  it("the setting is the owner's: 400 for bad values, 404 for another owner, 409 without a tunnel; nothing changes", async () => {
    const bot = await tunnelBot();
    for (const payload of [
      { forward: 'everything' },
      { forward: 'all', extra: 1 },
      {},
      { forward: null },
      [],
    ]) {
      const res = await patch(bot.bot_id, payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().error).toBe('validation_error');
    }
    const stranger = await createOwner(svc);
    expect((await patch(bot.bot_id, { forward: 'all' }, stranger.auth)).statusCode).toBe(404);
    expect(
      (await svc.app.inject({ url: `/api/v1/owner/bots/${bot.bot_id}/tunnel`, headers: stranger.auth }))
        .statusCode,
    ).toBe(404);
    expect((await patch(bot.bot_id, { forward: 'all' }, { authorization: '' })).statusCode).toBe(401);
    const direct = await activeBot(svc, owner);
    const conflict = await patch(direct.bot_id, { forward: 'all' });
    expect(conflict.statusCode).toBe(409);
    expect(conflict.json().error).toBe('conflict');
    const row = await svc.ctx.db.query<{ tunnel_forward: string }>(
      'SELECT tunnel_forward FROM bots WHERE id = $1',
      [bot.bot_id],
    );
    expect(row[0]!.tunnel_forward).toBe('webhook_only');
  });
});
