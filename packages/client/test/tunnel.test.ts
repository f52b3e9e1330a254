import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  binaryCodec,
  decodeBinaryFrame,
  encodeBinaryFrame,
  encodeRequest,
  type FrameHeader,
} from '../../../src/tunnels/protocol.ts';
import { DeliveryWorker } from '../../../src/webhooks/worker.ts';
import { createTestDatabase, isPostgres, type TestDatabase } from '../../../test/support/db.ts';
import { createOwner, createTestService, type TestService } from '../../../test/support/service.ts';
import { hostRequest, listen, registerTunnelBot, until } from '../../../test/tunnels/helpers.ts';
import { type BotPayTunnel, openTunnel, type TunnelRequest, webhookHandler } from '../src/tunnel/index.ts';
import { decodeFrame, encodeError, encodeResponse, FrameError } from '../src/tunnel/protocol.ts';
import type { WebhookEvent } from '../src/types.ts';

// The SDK's tunnel (`@botpay/client/tunnel`): the bot's own process connects to the service and
// its handler answers the requests sent to the bot's tunnel hostname, with no local HTTP server.
// Against the real service on 127.0.0.1: the relay, the delivery worker, a restart. The package
// does not depend on the database: the embedded leg runs it once.

describe('the SDK tunnel speaks the relay’s protocol', () => {
  it('decodes what the relay encodes, and the relay decodes what it encodes, byte for byte', () => {
    const body = Buffer.from('{"id":"evt_1"}');
    const fields = ['content-type', 'application/json', 'x-many', 'a', 'x-many', 'b'];
    const request = encodeRequest(binaryCodec, 7, 'POST', '/hooks/in?x=1', fields, 2500, body);
    expect(decodeFrame(request)).toEqual({
      type: 'request',
      id: 7,
      method: 'POST',
      path: '/hooks/in?x=1',
      fields,
      timeoutMs: 2500,
      body,
    });
    const hello: FrameHeader = {
      type: 'hello',
      version: 2,
      hostname: 'bot-x.tunnel.example',
      public_url: 'https://bot-x.tunnel.example',
      max_body_bytes: 1_048_576,
      request_timeout_ms: 10_000,
      heartbeat_ms: 20_000,
    };
    expect(decodeFrame(encodeBinaryFrame(hello))).toMatchObject({
      type: 'hello',
      hostname: 'bot-x.tunnel.example',
      public_url: 'https://bot-x.tunnel.example',
    });
    expect(decodeFrame(encodeBinaryFrame({ type: 'cancel', id: 9 }))).toEqual({ type: 'cancel', id: 9 });

    const response = encodeResponse(
      7,
      201,
      ['set-cookie', 'a=1', 'set-cookie', 'b=2', 'x-bad', 'a\nb'],
      body,
    );
    expect(decodeBinaryFrame(response)).toEqual({
      header: {
        type: 'response',
        id: 7,
        status: 201,
        headers: [
          ['set-cookie', 'a=1'],
          ['set-cookie', 'b=2'],
        ],
      },
      body,
    });
    expect(response).toEqual(
      encodeBinaryFrame(
        {
          type: 'response',
          id: 7,
          status: 201,
          headers: [
            ['set-cookie', 'a=1'],
            ['set-cookie', 'b=2'],
          ],
        },
        body,
      ),
    );
    expect(decodeBinaryFrame(encodeError(7, 'line\nbreak')).header).toEqual({
      type: 'error',
      id: 7,
      message: 'line break',
    });
  });

  it('refuses malformed frames', () => {
    const good = encodeRequest(binaryCodec, 3, 'POST', '/in', ['a', 'b'], 100, Buffer.alloc(0));
    const bad = (mutate: (b: Buffer) => void) => {
      const copy = Buffer.from(good);
      mutate(copy);
      return copy;
    };
    for (const frame of [
      Buffer.alloc(5),
      bad((b) => b.writeUInt32BE(0, 1)), // id 0
      bad((b) => b.writeUInt32BE(1_000_000, 9)), // meta longer than the frame
      bad((b) => {
        b[0] = 9; // unknown type
      }),
      bad((b) => {
        b[13] = 0x20; // a method with a space
      }),
      encodeRequest(binaryCodec, 3, 'POST', 'no-slash', [], 100, Buffer.alloc(0)),
      Buffer.concat([good.subarray(0, good.length - 2)]), // the last field cut
    ]) {
      expect(() => decodeFrame(frame)).toThrow(FrameError);
    }
  });
});

describe.skipIf(isPostgres)('the SDK tunnel against the real service', () => {
  let database: TestDatabase;
  let svc: TestService;
  let port: number;
  let server: string;
  const tunnels: BotPayTunnel[] = [];
  const logs: string[] = [];

  function tunnel(options: Parameters<typeof openTunnel>[0]): BotPayTunnel {
    const t = openTunnel({ backoffInitialMs: 50, backoffMaxMs: 400, log: (l) => logs.push(l), ...options });
    tunnels.push(t);
    return t;
  }

  beforeAll(async () => {
    database = await createTestDatabase();
    svc = await createTestService({ database, env: { WEBHOOK_TIMEOUT_MS: '1500' } });
    port = await listen(svc);
    server = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    await Promise.all(tunnels.map((t) => t.close()));
    await svc?.close();
    await database?.drop();
  });

  it('webhooks reach onEvent in the bot’s process, verified: no local server, no second process', async () => {
    const bot = await registerTunnelBot(svc, 18789, {}, { forward: 'webhook_only' });
    const events: WebhookEvent[] = [];
    const t = tunnel({
      server,
      token: bot.tunnel_token,
      webhooks: {
        secret: bot.webhook_secret,
        onEvent: (e) => void events.push(e),
        now: () => svc.clock.now(), // the service's fake clock signs the timestamps
      },
    });
    await t.waitConnected();
    expect(t.hostname).toBe(bot.hostname);
    const owner = await createOwner(svc);
    await svc.app.inject({
      method: 'POST',
      url: '/api/v1/owner/claims',
      headers: owner.auth,
      payload: { claim_token: bot.claim_token },
    });
    await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 1200 },
    });
    const worker = new DeliveryWorker(svc.ctx);
    await worker.runOnce();
    await worker.stop();
    await until(() => events.length >= 2);
    expect(events.map((e) => e.event).sort()).toEqual(['wallet.activated', 'wallet.funded']);
    expect(events.find((e) => e.event === 'wallet.funded')?.data).toMatchObject({ amount: 12 });
    const rows = await svc.ctx.db.query<{ status: string; response_status: number }>(
      'SELECT status, response_status FROM webhook_deliveries WHERE bot_id = $1',
      [bot.bot_id],
    );
    expect(rows).toEqual([
      { status: 'delivered', response_status: 200 },
      { status: 'delivered', response_status: 200 },
    ]);

    // A forged delivery to the public hostname (no valid signature) never reaches onEvent.
    const forged = await hostRequest(port, bot.hostname, {
      method: 'POST',
      path: bot.webhook_path,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'evt_forged', event: 'wallet.funded', data: {} }),
    });
    expect(forged.status).toBe(401);
    expect(events).toHaveLength(2);
  });

  it('a handler gets the request (method, path, headers, body) and its answer goes back as given', async () => {
    const bot = await registerTunnelBot(svc, 18789);
    const seen: TunnelRequest[] = [];
    const t = tunnel({
      server,
      token: bot.tunnel_token,
      handler: async (req) => {
        seen.push(req);
        if (req.path === '/throw') throw new Error('secret detail');
        return {
          status: 201,
          headers: { 'content-type': 'text/plain', 'set-cookie': ['a=1', 'b=2'] },
          body: `${req.method} ${req.path} ${req.body.toString()}`,
        };
      },
    });
    await t.waitConnected();
    const res = await hostRequest(port, bot.hostname, {
      method: 'PUT',
      path: '/any/path?q=1',
      headers: { 'x-custom': 'yes' },
      body: 'payload',
    });
    expect(res.status).toBe(201);
    expect(res.body.toString()).toBe('PUT /any/path?q=1 payload');
    expect(res.headers['set-cookie']).toEqual(['a=1', 'b=2']);
    expect(seen[0]?.headers['x-custom']).toBe('yes');
    expect(seen[0]?.headers.host).toBeUndefined(); // hop-by-hop fields never cross
    // A handler that throws: 502, and its message stays in the bot's process.
    const failed = await hostRequest(port, bot.hostname, { path: '/throw' });
    expect(failed.status).toBe(502);
    expect(failed.body.toString()).not.toContain('secret detail');
    expect(logs.some((l) => l.includes('secret detail'))).toBe(true);
  });

  it('bounded in flight: above the bound requests are refused at once; a cancelled call keeps its slot until it settles', async () => {
    const bot = await registerTunnelBot(svc, 18789);
    const release: Array<() => void> = [];
    const aborted: boolean[] = [];
    let started = 0;
    const t = tunnel({
      server,
      token: bot.tunnel_token,
      maxInFlight: 3,
      handler: (req) =>
        new Promise((resolve) => {
          started++;
          req.signal.addEventListener('abort', () => aborted.push(true));
          release.push(() => resolve({ status: 200, body: 'late' }));
        }),
    });
    await t.waitConnected();
    const answers = Array.from({ length: 5 }, () => hostRequest(port, bot.hostname, { path: '/hold' }));
    // Two of five are answered at once with 502; three wait in the handler.
    const settled: number[] = [];
    for (const a of answers) void a.then((r) => settled.push(r.status));
    await until(() => settled.length >= 2 && started === 3);
    expect(settled).toEqual([502, 502]);
    expect(t.inFlight).toBe(3);
    // The relay gives up after WEBHOOK_TIMEOUT_MS (504) and cancels: the handlers see the abort.
    await until(() => settled.length === 5, 10_000);
    expect(settled.slice(2)).toEqual([504, 504, 504]);
    await until(() => aborted.length === 3);
    // Cancelled but still running: the slots stay taken, so a new request is refused.
    expect(t.inFlight).toBe(3);
    expect((await hostRequest(port, bot.hostname, { path: '/hold' })).status).toBe(502);
    for (const r of release.splice(0)) r();
    await until(() => t.inFlight === 0);
    const next = hostRequest(port, bot.hostname, { path: '/hold' });
    await until(() => release.length === 1);
    release[0]?.();
    expect((await next).body.toString()).toBe('late');
  });

  it('reconnects after the service restarts and requests flow again; a rejected token or a replacement ends it', async () => {
    const bot = await registerTunnelBot(svc, 18789);
    const t = tunnel({
      server,
      token: bot.tunnel_token,
      handler: (req) => ({ status: 200, body: `ok ${req.path}` }),
    });
    await t.waitConnected();
    expect((await hostRequest(port, bot.hostname, { path: '/before' })).body.toString()).toBe('ok /before');
    await svc.close();
    await until(() => !t.connected);
    await new Promise((r) => setTimeout(r, 300)); // a few attempts fail against the closed port
    svc = await createTestService({ database, env: { WEBHOOK_TIMEOUT_MS: '1500' } });
    await listen(svc, port);
    await until(() => t.connections >= 2, 10_000);
    expect((await hostRequest(port, bot.hostname, { path: '/after' })).body.toString()).toBe('ok /after');

    const wrong = tunnel({ server, token: 'svc_tun_wrong', handler: () => ({ status: 200 }) });
    expect(await wrong.ended).toMatchObject({ reason: 'token_rejected' });
    await expect(wrong.waitConnected()).rejects.toThrow(/ended/);

    // A second client with the same token replaces the first, which ends (and does not fight back).
    const second = tunnel({
      server,
      token: bot.tunnel_token,
      handler: () => ({ status: 200, body: 'second' }),
    });
    expect(await t.ended).toMatchObject({ reason: 'replaced' });
    await second.waitConnected();
    expect((await hostRequest(port, bot.hostname, { path: '/x' })).body.toString()).toBe('second');
  });

  it('a service that answers with the first protocol version is refused with a message', async () => {
    const { WebSocketServer } = await import('ws');
    const old = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    // A version 1 hello: [4 bytes JSON length][JSON], whose first byte is 0.
    old.on('connection', (socket) => {
      const json = Buffer.from(
        JSON.stringify({ type: 'hello', version: 1, hostname: 'h', public_url: 'https://h' }),
      );
      const prefix = Buffer.alloc(4);
      prefix.writeUInt32BE(json.length, 0);
      socket.send(Buffer.concat([prefix, json]));
    });
    await new Promise((r) => old.once('listening', r));
    try {
      const address = old.address() as { port: number };
      const t = tunnel({
        server: `http://127.0.0.1:${address.port}`,
        token: 'svc_tun_x',
        handler: () => ({ status: 200 }),
      });
      expect(await t.ended).toMatchObject({ reason: 'unsupported_service' });
      expect(t.connections).toBe(0);
    } finally {
      for (const c of old.clients) c.terminate();
      await new Promise((r) => old.close(r));
    }
  });

  it('webhookHandler refuses another method (405) and an unsigned delivery (401) before onEvent', async () => {
    const events: string[] = [];
    const handle = webhookHandler({ secret: 'whsec_abcd', onEvent: (e) => void events.push(e.id) });
    const controller = new AbortController();
    const base = { path: '/in', body: Buffer.from('{}'), signal: controller.signal, headers: {} };
    expect((await handle({ ...base, method: 'GET' })).status).toBe(405);
    expect((await handle({ ...base, method: 'POST' })).status).toBe(401);
    expect(events).toEqual([]);
  });
});
