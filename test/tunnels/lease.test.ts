import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_REPLACED } from '../../src/tunnels/client.ts';
import type { TunnelCluster } from '../../src/tunnels/cluster.ts';
import type { TunnelRelay } from '../../src/tunnels/relay.ts';
import { createTestDatabase, isPostgres, type TestDatabase } from '../support/db.ts';
import { createTestService, type TestService } from '../support/service.ts';
import { hostRequest, listen, registerTunnelBot, startClient, startReceiver, until } from './helpers.ts';

// The lease mechanics of tunnels shared by instances (src/tunnels/cluster.ts), with two in-process
// instances listening on loopback and sharing one PostgreSQL schema: what the renewal does when a
// takeover's notification was lost, that an expired lease is not forwarded to, and the worker's
// forward() from an instance that does not hold the tunnel.
describe.runIf(isPostgres)('tunnel leases between two instances', () => {
  let database: TestDatabase;
  let a: TestService;
  let b: TestService;
  let portA: number;
  let portB: number;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  const relay = (svc: TestService) => svc.ctx.tunnelRelay as TunnelRelay;
  const cluster = (svc: TestService) => relay(svc).cluster as TunnelCluster;
  const lease = async (hostname: string) =>
    (
      await database.db.query<{ instance_id: string; epoch: string }>(
        'SELECT instance_id, epoch::text AS epoch FROM tunnel_leases WHERE hostname = $1',
        [hostname],
      )
    )[0];

  beforeAll(async () => {
    database = await createTestDatabase();
    a = await createTestService({ database });
    b = await createTestService({ database });
    portA = await listen(a);
    portB = await listen(b);
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await receiver?.close();
    await database?.drop();
  });

  it('a takeover whose notification was lost is found by the renewal: the older socket is closed (4409)', async () => {
    const bot = await registerTunnelBot(a, receiver.port);
    const { client, exit } = startClient({
      server: `http://127.0.0.1:${portA}`,
      token: bot.tunnel_token,
      port: receiver.port,
    });
    await client.waitConnected();
    await until(async () => (await lease(bot.hostname))?.instance_id === cluster(a).instanceId);
    // Another instance's write, as if its NOTIFY never arrived.
    await database.db.query(
      `UPDATE tunnel_leases SET epoch = nextval('tunnel_lease_epochs'), instance_id = 'elsewhere',
              internal_url = 'http://127.0.0.1:9' WHERE hostname = $1`,
      [bot.hostname],
    );
    expect(relay(a).hasConnection(bot.hostname)).toBe(true);
    await cluster(a).renew();
    expect((await exit).code).toBe(EXIT_REPLACED);
    expect(relay(a).hasConnection(bot.hostname)).toBe(false);
    // Its close did not delete the row it no longer owns.
    expect((await lease(bot.hostname))?.instance_id).toBe('elsewhere');
  });

  it('requests through the other instance follow the lease: an expired one is not forwarded to, a renewed one is', async () => {
    const bot = await registerTunnelBot(a, receiver.port);
    const { client } = startClient({
      server: `http://127.0.0.1:${portA}`,
      token: bot.tunnel_token,
      port: receiver.port,
    });
    try {
      await client.waitConnected();
      await until(async () => (await lease(bot.hostname)) !== undefined);
      const via = async (port: number) =>
        (await hostRequest(port, bot.hostname, { method: 'POST', path: '/x', body: 'hi' })).status;
      expect(await via(portB)).toBe(200);
      await database.db.query(
        "UPDATE tunnel_leases SET expires_at = now() - interval '1 second' WHERE hostname = $1",
        [bot.hostname],
      );
      await new Promise((r) => setTimeout(r, 1_100)); // B's lookup cache
      expect(await via(portB)).toBe(502);
      expect(await via(portA)).toBe(200); // the holder itself still has the socket
      await cluster(a).renew();
      await new Promise((r) => setTimeout(r, 1_100));
      expect(await via(portB)).toBe(200);
    } finally {
      await client.stop();
    }
  });

  it("the worker's forward() on the instance without the socket reaches it; nobody holding it rejects tunnel_not_connected", async () => {
    const bot = await registerTunnelBot(a, receiver.port);
    const { client } = startClient({
      server: `http://127.0.0.1:${portA}`,
      token: bot.tunnel_token,
      port: receiver.port,
    });
    const request = {
      hostname: bot.hostname,
      method: 'POST',
      path: bot.webhook_path,
      headers: { 'content-type': 'application/json', 'x-service-event': 'wallet.funded' },
      body: Buffer.from('{"event":"wallet.funded"}'),
      timeoutMs: 3_000,
    };
    try {
      await client.waitConnected();
      await until(async () => (await lease(bot.hostname)) !== undefined);
      expect(relay(b).hasConnection(bot.hostname)).toBe(false);
      expect(relay(b).canDeliver(bot.hostname)).toBe(true);
      const response = await relay(b).forward(request);
      expect(response.status).toBe(200);
      expect(response.body.toString()).toBe('{"event":"wallet.funded"}');
      expect(response.headers['set-cookie']).toBe('a=1, b=2');
      const arrived = receiver.received.at(-1)!;
      expect(arrived.headers['x-service-event']).toBe('wallet.funded');
    } finally {
      await client.stop();
    }
    await until(async () => (await lease(bot.hostname)) === undefined);
    await expect(relay(b).forward(request)).rejects.toMatchObject({ code: 'tunnel_not_connected' });
  });

  it("the holder's failures reach the caller through the other instance as they would directly (local service down: 502 with the cause)", async () => {
    const bot = await registerTunnelBot(a, 9);
    const { client } = startClient({ server: `http://127.0.0.1:${portA}`, token: bot.tunnel_token, port: 9 });
    try {
      await client.waitConnected();
      await until(async () => (await lease(bot.hostname)) !== undefined);
      for (const port of [portB, portA]) {
        const res = await hostRequest(port, bot.hostname, { method: 'POST', path: '/x', body: 'hi' });
        expect(res.status).toBe(502);
        const body = JSON.parse(res.body.toString());
        expect(body).toMatchObject({ error: 'tunnel_upstream_error' });
        expect(body.message).toContain('ECONNREFUSED');
      }
    } finally {
      await client.stop();
    }
  });

  it('an address in a lease that is no holder of ours is not trusted: unsigned and forged answers are refused, an answer over the bound is cut off', async () => {
    const bot = await registerTunnelBot(b, receiver.port);
    let mode: 'unsigned' | 'forged' | 'huge' = 'unsigned';
    const signatures: string[] = [];
    let hugeWritten = 0;
    let hugeClosed: () => void = () => {};
    const closed = new Promise<void>((resolve) => (hugeClosed = resolve));
    const fake: Server = createServer((req, res) => {
      signatures.push(String(req.headers['x-botpay-cluster']));
      req.resume();
      req.on('end', () => {
        if (mode === 'huge') {
          // A valid-looking answer that never ends: 64 KiB at a time while the caller reads.
          res.writeHead(200, {
            'x-botpay-cluster': 'a'.repeat(64),
            'content-type': 'application/octet-stream',
          });
          const chunk = Buffer.alloc(64 * 1024, 120);
          const more = () => {
            while (!res.destroyed && hugeWritten < 16 * 1024 * 1024) {
              hugeWritten += chunk.length;
              if (!res.write(chunk)) return void res.once('drain', more);
            }
            res.end();
          };
          res.on('close', () => hugeClosed());
          more();
          return;
        }
        const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
        if (mode === 'forged') headers['x-botpay-cluster'] = 'b'.repeat(64);
        res.writeHead(200, headers);
        res.end('\u0000\u0000\u0000\u000f{"status":200}forged');
      });
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    try {
      await database.db.query(
        `INSERT INTO tunnel_leases (hostname, bot_id, instance_id, internal_url, epoch, expires_at)
         VALUES ($1, $2, 'elsewhere', $3, nextval('tunnel_lease_epochs'), now() + interval '1 minute')`,
        [bot.hostname, bot.bot_id, `http://127.0.0.1:${(fake.address() as AddressInfo).port}`],
      );
      const via = async () => hostRequest(portB, bot.hostname, { method: 'POST', path: '/x', body: 'hi' });
      for (const m of ['unsigned', 'forged'] as const) {
        mode = m;
        const res = await via();
        expect(res.status, m).toBe(502);
        // Not delivered: looked up again once, then nobody holds it.
        expect(JSON.parse(res.body.toString())).toMatchObject({ error: 'tunnel_not_connected' });
      }
      mode = 'huge';
      const res = await via();
      expect(res.status).toBe(502);
      expect(JSON.parse(res.body.toString())).toMatchObject({ error: 'tunnel_upstream_error' });
      await closed;
      // Cut off near the bound (1 MB + 128 KiB of meta), not read to the end.
      expect(hugeWritten).toBeLessThan(8 * 1024 * 1024);
      // Every signed request had a nonce of its own.
      const nonces = signatures.map((sig) => /,n=([0-9a-f]{32}),/.exec(sig)?.[1]);
      expect(nonces.every(Boolean)).toBe(true);
      expect(new Set(nonces).size).toBe(signatures.length);
      expect(signatures.length).toBeGreaterThanOrEqual(5);
    } finally {
      fake.closeAllConnections();
      await new Promise((resolve) => fake.close(resolve));
    }
  });
});
