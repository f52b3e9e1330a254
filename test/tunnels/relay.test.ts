import { createHmac } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { EXIT_REPLACED, EXIT_TOKEN_REJECTED, type TunnelClient } from '../../src/tunnels/client.ts';
import { encodeJsonFrame, TUNNEL_CONNECT_PATH } from '../../src/tunnels/protocol.ts';
import { TunnelError, type TunnelRelay } from '../../src/tunnels/relay.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  registerBot,
  type TestOwner,
  type TestService,
} from '../support/service.ts';
import {
  hostRequest,
  registerTunnelBot,
  startClient,
  startReceiver,
  startRelayService,
  type TunnelBot,
  until,
} from './helpers.ts';

/** A claimed (active) bot with a managed tunnel. */
async function activeTunnelBot(svc: TestService, owner: TestOwner, localPort: number) {
  const bot = await activeBot(svc, owner, { body: { callback_url: undefined, local_port: localPort } });
  return bot as typeof bot & { webhook_url: string; tunnel_token: string };
}

// Everything here is real and on loopback: the service listens on 127.0.0.1, the tunnel client
// connects to it over a WebSocket and forwards to a real HTTP receiver on 127.0.0.1.

describe('managed tunnel relay', () => {
  let svc: TestService;
  let port: number;
  let server: string;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let owner: TestOwner;
  const clients: TunnelClient[] = [];

  let close: () => Promise<void>;

  beforeAll(async () => {
    ({ svc, port, server, receiver, close } = await startRelayService({ WEBHOOK_TIMEOUT_MS: '700' }));
    owner = await createOwner(svc);
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.stop()));
  });
  afterAll(() => close());

  const relay = () => svc.ctx.tunnelRelay as TunnelRelay;

  async function connected(bot: TunnelBot, localPort = receiver.port) {
    const started = startClient({ server, token: bot.tunnel_token, port: localPort, path: bot.webhook_path });
    clients.push(started.client);
    await started.client.waitConnected();
    return started;
  }

  it('relays a request with the bot Host header to the local receiver and back', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    const { client, lines } = await connected(bot);
    expect(client.hostname).toBe(bot.hostname);
    expect(relay().hasConnection(bot.hostname)).toBe(true);

    const before = receiver.received.length;
    const res = await hostRequest(port, `${bot.hostname}:${port}`, {
      method: 'POST',
      path: `${bot.webhook_path}?x=1`,
      headers: { 'content-type': 'application/json', 'x-custom': 'yes' },
      body: '{"hello":"world"}',
    });
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('{"hello":"world"}');
    expect(res.headers['x-receiver']).toBe('receiver');
    // Repeated response headers stay apart.
    expect(res.headers['set-cookie']).toEqual(['a=1', 'b=2']);
    const got = receiver.received[before]!;
    expect(got.method).toBe('POST');
    expect(got.url).toBe(`${bot.webhook_path}?x=1`);
    expect(got.headers['x-custom']).toBe('yes');
    expect(got.headers['x-forwarded-host']).toBe(`${bot.hostname}:${port}`);
    expect(got.headers['x-forwarded-for']).toBe('127.0.0.1');
    // One log line per request on the client.
    await until(() => lines.some((l) => l.includes(`POST ${bot.webhook_path}?x=1 → 200`)));
  });

  it('relays any path and method, including paths the API owns, without touching the API', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    await connected(bot);
    const before = receiver.received.length;
    // Without port in the Host header, too.
    const res = await hostRequest(port, bot.hostname, { method: 'PUT', path: '/api/v1/bot/status' });
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('PUT /api/v1/bot/status');
    expect(receiver.received[before]?.url).toBe('/api/v1/bot/status');
    const head = await hostRequest(port, bot.hostname, { method: 'DELETE', path: '/anything/at/all' });
    expect(head.status).toBe(200);
    expect(head.body.toString()).toBe('DELETE /anything/at/all');
    // The receiver's status codes pass through.
    const teapot = await hostRequest(port, bot.hostname, { path: '/status/418' });
    expect(teapot.status).toBe(418);
  });

  it('takes tunnel traffic before any API hook also for requests that reach Fastify (inject)', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    const idle = await svc.app.inject({ url: '/api/v1/bot/status', headers: { host: bot.hostname } });
    expect(idle.statusCode).toBe(502);
    expect(idle.json()).toMatchObject({ error: 'tunnel_not_connected' });
    await connected(bot);
    const res = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/owner/claims',
      headers: { host: `${bot.hostname}:8080`, 'content-type': 'text/plain' },
      payload: 'not json',
    });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('not json');
    expect(res.headers['x-receiver']).toBe('receiver');
  });

  it('forward() (the webhook worker path) delivers identical bytes and headers incl. Authorization for a primary bot', async () => {
    const bot = await registerTunnelBot(svc, receiver.port, { bot_type: 'primary' });
    expect(bot.primary_hooks_token).toMatch(/^svc_hooks_/);
    await connected(bot);
    // What a worker does: decrypt the stored hooks token, sign the raw body with the webhook secret.
    const row = (
      await svc.ctx.db.query<{ hooks_token_enc: string }>('SELECT hooks_token_enc FROM bots WHERE id = $1', [
        bot.bot_id,
      ])
    )[0]!;
    const hooksToken = svc.ctx.secrets.decrypt(row.hooks_token_enc);
    expect(hooksToken).toBe(bot.primary_hooks_token);
    const body = Buffer.from(
      JSON.stringify({
        event: 'wallet.funded',
        timestamp: '2026-01-01T00:00:00.000Z',
        bot_id: bot.bot_id,
        data: { amount: 25, note: 'ünïcødé ✓' },
      }),
    );
    const signature = `sha256=${createHmac('sha256', bot.webhook_secret).update(body).digest('hex')}`;
    const headers = {
      'Content-Type': 'application/json',
      'X-Service-Signature': signature,
      'X-Service-Event': 'wallet.funded',
      Authorization: `Bearer ${hooksToken}`,
      'User-Agent': 'BotPaymentService-Webhooks/1.0',
    };
    const before = receiver.received.length;
    const response = await relay().forward({
      hostname: bot.hostname,
      method: 'POST',
      path: bot.webhook_path,
      headers,
      body,
      timeoutMs: 5_000,
    });
    expect(response.status).toBe(200);
    expect(response.body.equals(body)).toBe(true);
    expect(response.headers['x-receiver']).toBe('receiver');
    const got = receiver.received[before]!;
    expect(got.method).toBe('POST');
    expect(got.url).toBe('/hooks/service');
    expect(got.body.equals(body)).toBe(true);
    for (const [name, value] of Object.entries(headers)) expect(got.headers[name.toLowerCase()]).toBe(value);
    expect(got.headers['content-length']).toBe(String(body.length));
    // The receiver can verify the signature over the bytes it got.
    expect(`sha256=${createHmac('sha256', bot.webhook_secret).update(got.body).digest('hex')}`).toBe(
      got.headers['x-service-signature'],
    );
  });

  it('forward() rejects with tunnel_not_connected when no client is connected, and on timeout', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    const request = {
      hostname: bot.hostname,
      method: 'POST',
      path: '/slow',
      headers: {},
      body: Buffer.from('x'),
      timeoutMs: 300,
    };
    await expect(relay().forward(request)).rejects.toMatchObject({ code: 'tunnel_not_connected' });
    await connected(bot);
    const error = await relay()
      .forward(request)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TunnelError);
    expect((error as TunnelError).code).toBe('tunnel_timeout');
  });

  it('times every request out at its own deadline (one timer per connection): a short timeout after a long one, answered ones never', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    await connected(bot);
    const request = (path: string, timeoutMs: number) =>
      relay().forward({
        hostname: bot.hostname,
        method: 'POST',
        path,
        headers: {},
        body: Buffer.from('x'),
        timeoutMs,
      });
    const started = performance.now();
    const outcome = (p: Promise<unknown>) =>
      p.then(
        () => ({ code: 'ok', ms: performance.now() - started }),
        (e: TunnelError) => ({ code: e.code, ms: performance.now() - started }),
      );
    // The connection's timer is first set for the long deadline, then moved earlier for the short one.
    const long = outcome(request('/slow', 1_500));
    const short = outcome(request('/slow', 200));
    // Answered well within its short timeout: never timed out (nor its neighbours early).
    const quick = outcome(request('/quick', 400));
    const [l, s, q] = await Promise.all([long, short, quick]);
    expect(q.code).toBe('ok');
    expect(s.code).toBe('tunnel_timeout');
    expect(s.ms).toBeGreaterThanOrEqual(190);
    expect(s.ms).toBeLessThan(1_200);
    expect(l.code).toBe('tunnel_timeout');
    expect(l.ms).toBeGreaterThanOrEqual(1_490);
    // The tunnel keeps working after timeouts (the timer is set again for later requests).
    expect((await outcome(request('/slow', 300))).code).toBe('tunnel_timeout');
    expect((await outcome(request('/quick', 2_000))).code).toBe('ok');
  });

  it('answers 502 (JSON, or HTML for browsers) when the bot client is not connected', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    const json = await hostRequest(port, bot.hostname, { method: 'POST', path: '/webhook', body: 'x' });
    expect(json.status).toBe(502);
    expect(JSON.parse(json.body.toString())).toMatchObject({ error: 'tunnel_not_connected' });
    expect(json.body.toString()).toContain(bot.hostname);
    const html = await hostRequest(port, bot.hostname, { headers: { accept: 'text/html' } });
    expect(html.status).toBe(502);
    expect(html.headers['content-type']).toContain('text/html');
    expect(html.body.toString()).toContain('Tunnel not connected');
    // An unknown bot hostname looks the same (no existence leak), and never reaches the API.
    const unknown = await hostRequest(port, 'bot-nonexistent.tunnel.localhost', {
      path: '/api/v1/bot/status',
    });
    expect(unknown.status).toBe(502);
  });

  it('refuses bodies over 1 MB with 413 and relays exactly 1 MB', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    await connected(bot);
    const exact = Buffer.alloc(1_048_576, 7);
    const ok = await hostRequest(port, bot.hostname, { method: 'POST', path: '/echo', body: exact });
    expect(ok.status).toBe(200);
    expect(ok.body.equals(exact)).toBe(true);
    const before = receiver.received.length;
    const tooBig = await hostRequest(port, bot.hostname, {
      method: 'POST',
      path: '/echo',
      body: Buffer.alloc(1_048_577, 7),
    });
    expect(tooBig.status).toBe(413);
    expect(JSON.parse(tooBig.body.toString())).toMatchObject({ error: 'payload_too_large' });
    // Chunked (no Content-Length) is counted as it arrives.
    const chunked = await hostRequest(port, bot.hostname, {
      method: 'POST',
      path: '/echo',
      headers: { 'transfer-encoding': 'chunked' },
      body: Buffer.alloc(1_200_000, 7),
    });
    expect(chunked.status).toBe(413);
    expect(receiver.received.length).toBe(before);
    // A local response over 1 MB is not relayed either.
    const big = await hostRequest(port, bot.hostname, { path: '/big' });
    expect(big.status).toBe(502);
    expect(JSON.parse(big.body.toString()).message).toContain('exceeds');
  });

  it('answers 504 when the local service is slower than the request timeout, and keeps working', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    await connected(bot);
    const slow = await hostRequest(port, bot.hostname, { path: '/slow' });
    expect(slow.status).toBe(504);
    expect(JSON.parse(slow.body.toString())).toMatchObject({ error: 'tunnel_timeout' });
    const fast = await hostRequest(port, bot.hostname, { path: '/fast' });
    expect(fast.status).toBe(200);
  });

  it('answers 502 with the cause when the local service is down', async () => {
    const bot = await registerTunnelBot(svc, 9);
    await connected(bot, 9);
    const res = await hostRequest(port, bot.hostname, { path: '/webhook' });
    expect(res.status).toBe(502);
    expect(JSON.parse(res.body.toString())).toMatchObject({ error: 'tunnel_upstream_error' });
    expect(JSON.parse(res.body.toString()).message).toContain('ECONNREFUSED');
  });

  it('carries 50 concurrent requests over one tunnel', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    await connected(bot);
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        hostRequest(port, bot.hostname, {
          method: 'POST',
          path: `/c/${i}`,
          body: `request ${i} ${'x'.repeat(i * 100)}`,
        }),
      ),
    );
    results.forEach((res, i) => {
      expect(res.status).toBe(200);
      expect(res.body.toString()).toBe(`request ${i} ${'x'.repeat(i * 100)}`);
    });
  });

  it('refuses a wrong token: the client exits non-zero with a clear message', async () => {
    const { exit, lines } = startClient({
      server,
      token: `svc_tun_${'0'.repeat(48)}`,
      port: receiver.port,
    });
    const result = await exit;
    expect(result.code).toBe(EXIT_TOKEN_REJECTED);
    expect(result.message).toMatch(/rejected the tunnel token \(HTTP 401\)/);
    expect(lines.join('\n')).toContain('rejected');
    // Malformed and missing tokens are refused at the upgrade too.
    for (const headers of [{}, { authorization: 'Bearer nope' }]) {
      const status = await new Promise<number>((resolve) => {
        const ws = new WebSocket(`ws://127.0.0.1:${port}${TUNNEL_CONNECT_PATH}`, { headers });
        ws.on('unexpected-response', (_req, res) => {
          resolve(res.statusCode ?? 0);
          ws.terminate();
        });
        ws.on('open', () => resolve(101));
        ws.on('error', () => {});
      });
      expect(status).toBe(401);
    }
    // A plain GET (no upgrade) with a valid token is told to upgrade.
    const bot = await registerTunnelBot(svc, receiver.port);
    const plain = await svc.app.inject({
      url: TUNNEL_CONNECT_PATH,
      headers: { authorization: `Bearer ${bot.tunnel_token}` },
    });
    expect(plain.statusCode).toBe(426);
  });

  it("another bot's token cannot serve this hostname", async () => {
    const victim = await registerTunnelBot(svc, receiver.port);
    const attacker = await registerTunnelBot(svc, receiver.port);
    const { client } = await connected(attacker);
    expect(client.hostname).toBe(attacker.hostname);
    expect(relay().hasConnection(victim.hostname)).toBe(false);
    const before = receiver.received.length;
    const res = await hostRequest(port, victim.hostname, { path: '/webhook' });
    expect(res.status).toBe(502);
    expect(receiver.received.length).toBe(before);
    // The attacker's own hostname works.
    expect((await hostRequest(port, attacker.hostname, { path: '/webhook' })).status).toBe(200);
  });

  it('a second connection with the same token replaces the first', async () => {
    const other = await startReceiver('second');
    try {
      const bot = await registerTunnelBot(svc, receiver.port);
      const first = await connected(bot);
      const second = await connected(bot, other.port);
      const firstExit = await first.exit;
      expect(firstExit.code).toBe(EXIT_REPLACED);
      expect(firstExit.message).toContain('replaced');
      expect(second.client.connected).toBe(true);
      const res = await hostRequest(port, bot.hostname, { path: '/webhook' });
      expect(res.status).toBe(200);
      expect(res.headers['x-receiver']).toBe('second');
    } finally {
      await other.close();
    }
  });

  it('drops a connection that stops answering heartbeats', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    // A raw client that never answers pings (autoPong off): a dead peer as far as the relay can tell.
    const ws = new WebSocket(`ws://127.0.0.1:${port}${TUNNEL_CONNECT_PATH}`, {
      headers: { authorization: `Bearer ${bot.tunnel_token}` },
      autoPong: false,
    });
    const closed = new Promise<void>((resolve) => ws.on('close', () => resolve()));
    await new Promise((resolve) => ws.once('message', resolve)); // hello
    expect(relay().hasConnection(bot.hostname)).toBe(true);
    relay().heartbeat(); // ping
    relay().heartbeat(); // no pong since: dropped
    expect(relay().hasConnection(bot.hostname)).toBe(false);
    await closed;
  });

  it('ignores malformed frames and answers to unknown request ids', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    const ws = new WebSocket(`ws://127.0.0.1:${port}${TUNNEL_CONNECT_PATH}`, {
      headers: { authorization: `Bearer ${bot.tunnel_token}` },
    });
    await new Promise((resolve) => ws.once('message', resolve));
    ws.send(Buffer.from([0, 0, 0, 200, 1, 2]));
    ws.send('text frame');
    ws.send(encodeJsonFrame({ type: 'response', id: 999, status: 200, headers: [] }, Buffer.from('late')));
    await new Promise((r) => setTimeout(r, 50));
    expect(relay().hasConnection(bot.hostname)).toBe(true);
    ws.close();
    await until(() => !relay().hasConnection(bot.hostname));
  });

  it('freezing the wallet does not cut the tunnel', async () => {
    const bot = await activeTunnelBot(svc, owner, receiver.port);
    const hostname = new URL(bot.webhook_url).hostname;
    const started = startClient({ server, token: bot.tunnel_token, port: receiver.port });
    clients.push(started.client);
    await started.client.waitConnected();
    const freeze = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
      headers: owner.auth,
    });
    expect(freeze.statusCode).toBe(200);
    expect(relay().hasConnection(hostname)).toBe(true);
    expect((await hostRequest(port, hostname, { method: 'POST', path: '/hooks/service' })).status).toBe(200);
  });

  describe('tunnel token rotation', () => {
    it('issues a new token once, cuts the old client and accepts only the new token', async () => {
      const bot = await activeTunnelBot(svc, owner, receiver.port);
      const hostname = new URL(bot.webhook_url).hostname;
      const old = startClient({ server, token: bot.tunnel_token, port: receiver.port });
      await old.client.waitConnected();

      const res = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/tunnel-token/rotate`,
        headers: owner.auth,
      });
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(body.tunnel_token).toMatch(/^svc_tun_[0-9a-f]{48}$/);
      expect(body.tunnel_token).not.toBe(bot.tunnel_token);
      // The token is in the environment assignment, not an argument of the client.
      expect(body.tunnel_client_command).toBe(
        `BOTPAY_TUNNEL_TOKEN=${body.tunnel_token} botpay tunnel --server http://localhost:8080 --port ${receiver.port} --path /hooks/service`,
      );
      const oldExit = await old.exit;
      expect(oldExit.code).toBe(EXIT_TOKEN_REJECTED);
      expect(relay().hasConnection(hostname)).toBe(false);

      // The old token is refused from now on; the new one serves the same hostname.
      const retry = await startClient({ server, token: bot.tunnel_token, port: receiver.port }).exit;
      expect(retry.code).toBe(EXIT_TOKEN_REJECTED);
      const fresh = await connected({
        tunnel_token: body.tunnel_token,
        webhook_path: '/hooks/service',
      } as TunnelBot);
      expect(fresh.client.hostname).toBe(hostname);
      expect((await hostRequest(port, hostname, { method: 'POST', path: '/hooks/service' })).status).toBe(
        200,
      );

      const audit = await svc.app.inject({
        url: `/api/v1/owner/bots/${bot.bot_id}/audit-log`,
        headers: owner.auth,
      });
      expect(audit.json().entries.map((e: { action: string }) => e.action)).toContain('tunnel_token.rotated');
      // The new token is not in the logs.
      expect(svc.logs()).not.toContain(body.tunnel_token);
    });

    it('needs the owner token (401), hides foreign bots (404) and refuses bots without a tunnel (409)', async () => {
      const bot = await activeTunnelBot(svc, owner, receiver.port);
      const url = `/api/v1/owner/bots/${bot.bot_id}/tunnel-token/rotate`;
      const unauth = await svc.app.inject({ method: 'POST', url });
      expect(unauth.statusCode).toBe(401);
      expect(unauth.json()).toMatchObject({ error: 'Authentication required' });
      const stranger = await createOwner(svc);
      const foreign = await svc.app.inject({ method: 'POST', url, headers: stranger.auth });
      expect(foreign.statusCode).toBe(404);
      const unclaimed = await registerBot(svc, { callback_url: undefined });
      const notMine = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${unclaimed.bot_id}/tunnel-token/rotate`,
        headers: owner.auth,
      });
      expect(notMine.statusCode).toBe(404);
      const callbackBot = await activeBot(svc, owner);
      const conflict = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${callbackBot.bot_id}/tunnel-token/rotate`,
        headers: owner.auth,
      });
      expect(conflict.statusCode).toBe(409);
      const bad = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/bots/not-an-id/tunnel-token/rotate',
        headers: owner.auth,
      });
      expect(bad.statusCode).toBe(400);
      // Nothing changed for the refused calls: the original token still authenticates.
      const still = startClient({ server, token: bot.tunnel_token, port: receiver.port });
      clients.push(still.client);
      await still.client.waitConnected();
    });

    it('a relay drops a client whose token was rotated elsewhere (revalidation)', async () => {
      const bot = await registerTunnelBot(svc, receiver.port);
      const started = startClient({ server, token: bot.tunnel_token, port: receiver.port });
      await started.client.waitConnected();
      // Another instance rotated it: only the database changed.
      await svc.ctx.db.query('UPDATE bots SET tunnel_token_hash = $2 WHERE id = $1', [
        bot.bot_id,
        'x'.repeat(64),
      ]);
      await relay().revalidate();
      expect((await started.exit).code).toBe(EXIT_TOKEN_REJECTED);
    });
  });

  it('lists the connect and rotate routes in the OpenAPI document', async () => {
    const doc = (await svc.app.inject({ url: '/openapi.json' })).json();
    expect(doc.paths[TUNNEL_CONNECT_PATH]?.get).toBeDefined();
    expect(doc.paths['/api/v1/owner/bots/{bot_id}/tunnel-token/rotate']?.post).toBeDefined();
  });
});

describe('an instance without the tunnel role', () => {
  it('holds no tunnel, refuses client connections (503) and answers 502 for bot hostnames nobody holds', async () => {
    const svc = await createTestService({ env: { ROLES: 'api,worker,scheduler' } });
    try {
      // On PostgreSQL its relay only hands requests to the instance holding the tunnel (cluster.ts).
      if (svc.ctx.db.kind === 'pglite') expect(svc.ctx.tunnelRelay).toBeUndefined();
      else expect((svc.ctx.tunnelRelay as TunnelRelay).connectionCount()).toBe(0);
      const bot = await registerTunnelBot(svc, 9);
      const connect = await svc.app.inject({
        url: TUNNEL_CONNECT_PATH,
        headers: { authorization: `Bearer ${bot.tunnel_token}` },
      });
      expect(connect.statusCode).toBe(503);
      const relayed = await svc.app.inject({ url: '/webhook', headers: { host: bot.hostname } });
      expect(relayed.statusCode).toBe(502);
      expect(relayed.json()).toMatchObject({ error: 'tunnel_not_connected' });
    } finally {
      await svc.close();
    }
  });
});
