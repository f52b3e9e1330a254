import { request as httpRequest } from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_REPLACED } from '../../src/tunnels/client.ts';
import { clusterKey, INTERNAL_PATH, signRequest } from '../../src/tunnels/cluster.ts';
import { ownerToken, sleep } from '../scale/helpers.ts';
import { connectionFor, createTestDatabase, isPostgres, type TestDatabase } from '../support/db.ts';
import { type ServiceProcess, startServiceProcess } from '../support/process.ts';
import { TEST_SECRET_KEY } from '../support/service.ts';
import { hostRequest, type Received, startClient, startReceiver, until } from './helpers.ts';

// Three real `botpay serve` processes on one PostgreSQL schema, and a TCP load balancer in front of
// them for the tunnel clients (a new connection goes to the first instance that accepts it). A
// tunnel held by one instance is reached through every instance, webhook workers on instances that
// do not hold it deliver through it, the holder can die under load (the client reconnects through
// the balancer; nothing lost, nothing delivered more often than attempted), a second connection
// takes the tunnel over, and the internal endpoint refuses whatever is not signed for it.

/** A TCP balancer: each connection goes to the first backend (in order) that accepts it. */
async function startBalancer(backends: () => number[]): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    socket.pause();
    const list = backends();
    const attempt = (i: number) => {
      if (i >= list.length) {
        socket.destroy();
        return;
      }
      const upstream = connect(list[i]!, '127.0.0.1');
      let open = false;
      upstream.once('connect', () => {
        open = true;
        sockets.add(upstream);
        socket.pipe(upstream);
        upstream.pipe(socket);
        socket.resume();
      });
      upstream.on('error', () => {
        if (!open) attempt(i + 1);
        else socket.destroy();
      });
      upstream.on('close', () => {
        sockets.delete(upstream);
        if (open) socket.destroy();
      });
      socket.on('close', () => upstream.destroy());
    };
    attempt(0);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A raw POST to an instance's internal endpoint. */
function internalPost(
  port: number,
  body: Buffer,
  headers: Record<string, string>,
  method = 'POST',
): Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        method,
        path: INTERNAL_PATH,
        headers: { 'content-length': body.length, ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

function forwardBody(meta: Record<string, unknown>, body = Buffer.alloc(0)): Buffer {
  const json = Buffer.from(JSON.stringify(meta));
  const length = Buffer.alloc(4);
  length.writeUInt32BE(json.length);
  return Buffer.concat([length, json, body]);
}

describe.runIf(isPostgres)('tunnels shared by three instances', () => {
  let database: TestDatabase;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let other: Awaited<ReturnType<typeof startReceiver>>;
  let balancer: Awaited<ReturnType<typeof startBalancer>>;
  const instances: ServiceProcess[] = [];
  let owner: { id: string; email: string; token: string };
  const alive = () => instances.filter((s) => s.child.exitCode === null && s.child.signalCode === null);

  beforeAll(async () => {
    database = await createTestDatabase({ poolSize: 4 });
    receiver = await startReceiver('first');
    other = await startReceiver('second');
    const env = {
      DATABASE_URL: connectionFor(database.schema!),
      SECRET_KEY: TEST_SECRET_KEY,
      ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
      WEBHOOK_TIMEOUT_MS: '5000',
      WEBHOOK_RETRY_DELAYS: '1,1,1,1,1,1,1,1,1,1',
      TUNNEL_LEASE_SECONDS: '6',
      REGISTRATION_RATE_LIMIT_PER_HOUR: '100',
    };
    // The first instance holds tunnels but runs no worker: its tunnels' deliveries are made elsewhere.
    const roles = ['api,tunnel', 'api,tunnel,worker', 'api,tunnel,worker,scheduler'];
    instances.push(...(await Promise.all(roles.map((r) => startServiceProcess({ ...env, ROLES: r })))));
    balancer = await startBalancer(() => instances.map((s) => s.port));
    owner = await ownerToken(database.db, 'cluster-owner@example.com');
  }, 120_000);

  afterAll(async () => {
    for (const s of instances) if (s.child.exitCode === null) s.child.kill('SIGTERM');
    await Promise.all(instances.map((s) => s.exited));
    await balancer?.close();
    await receiver?.close();
    await other?.close();
    await database?.drop();
  });

  async function tunnelBot(name: string, localPort: number) {
    const res = await fetch(`${instances[1]!.url}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ bot_name: name, owner_email: owner.email, local_port: localPort }),
    });
    expect(res.status).toBe(201);
    const bot = (await res.json()) as {
      bot_id: string;
      webhook_url: string;
      tunnel_token: string;
      claim_token: string;
    };
    const url = new URL(bot.webhook_url);
    return { ...bot, hostname: url.hostname, path: url.pathname };
  }

  const holderOf = async (hostname: string) =>
    (
      await database.db.query<{ instance_id: string; internal_url: string; epoch: string }>(
        'SELECT instance_id, internal_url, epoch::text AS epoch FROM tunnel_leases WHERE hostname = $1',
        [hostname],
      )
    )[0];
  const instanceAt = (url: string) => instances.find((s) => s.url === url)!;
  const byEvent = (received: Received[]) => {
    const counts = new Map<string, number>();
    for (const r of received) {
      const id = r.headers['webhook-id'];
      if (typeof id === 'string') counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    return counts;
  };

  it('a request to any instance reaches the tunnel another instance holds', async () => {
    const bot = await tunnelBot('cluster-reach', receiver.port);
    const { client } = startClient({
      server: `http://127.0.0.1:${balancer.port}`,
      token: bot.tunnel_token,
      port: receiver.port,
    });
    try {
      await client.waitConnected();
      await until(async () => (await holderOf(bot.hostname)) !== undefined, 10_000);
      const lease = (await holderOf(bot.hostname))!;
      expect(lease.internal_url).toBe(instances[0]!.url); // the balancer's first choice
      // The holder renews its lease (every third of TUNNEL_LEASE_SECONDS=6).
      const expiry = async () =>
        (
          await database.db.query<{ ms: number }>(
            'SELECT (extract(epoch FROM expires_at) * 1000)::float8 AS ms FROM tunnel_leases WHERE hostname = $1',
            [bot.hostname],
          )
        )[0]!.ms;
      const initial = await expiry();
      await until(async () => (await expiry()) > initial, 8_000);
      for (const s of instances) {
        const body = `via ${s.port}`;
        const res = await hostRequest(s.port, bot.hostname, { method: 'POST', path: bot.path, body });
        expect(res.status, res.body.toString()).toBe(200);
        expect(res.body.toString()).toBe(body);
        expect(res.headers['x-receiver']).toBe('first');
        expect(res.rawHeaders.filter((h) => h.toLowerCase() === 'set-cookie')).toHaveLength(2);
        const arrived = receiver.received.at(-1)!;
        expect(arrived.headers['x-forwarded-host']).toBe(bot.hostname);
      }
      // The holder's forwarding policy applies to requests arriving at other instances too.
      const refused = await hostRequest(instances[2]!.port, bot.hostname, { method: 'GET', path: '/admin' });
      expect(refused.status).toBe(404);
      const wrongMethod = await hostRequest(instances[1]!.port, bot.hostname, {
        method: 'GET',
        path: bot.path,
      });
      expect(wrongMethod.status).toBe(405);
      expect(wrongMethod.headers.allow).toBe('POST');
    } finally {
      await client.stop();
    }
    // The socket closed: its lease is released and every instance answers 502.
    await until(async () => (await holderOf(bot.hostname)) === undefined, 10_000);
    for (const s of instances) {
      const res = await hostRequest(s.port, bot.hostname, { method: 'POST', path: bot.path });
      expect(res.status).toBe(502);
      expect(JSON.parse(res.body.toString())).toMatchObject({ error: 'tunnel_not_connected' });
    }
  });

  it('a second connection takes the tunnel over: the first is closed as replaced, one holder', async () => {
    const bot = await tunnelBot('cluster-takeover', receiver.port);
    const first = startClient({ server: instances[0]!.url, token: bot.tunnel_token, port: receiver.port });
    await first.client.waitConnected();
    await until(async () => (await holderOf(bot.hostname))?.internal_url === instances[0]!.url, 10_000);
    const before = (await holderOf(bot.hostname))!;
    const second = startClient({ server: instances[2]!.url, token: bot.tunnel_token, port: other.port });
    try {
      await second.client.waitConnected();
      expect((await first.exit).code).toBe(EXIT_REPLACED);
      const after = (await holderOf(bot.hostname))!;
      expect(after.internal_url).toBe(instances[2]!.url);
      expect(BigInt(after.epoch)).toBeGreaterThan(BigInt(before.epoch));
      for (const s of instances) {
        const res = await hostRequest(s.port, bot.hostname, { method: 'POST', path: bot.path, body: 'x' });
        expect(res.status).toBe(200);
        expect(res.headers['x-receiver']).toBe('second');
      }
      // The old holder released nothing of the new one's.
      await sleep(300);
      expect((await holderOf(bot.hostname))?.epoch).toBe(after.epoch);
    } finally {
      await second.client.stop();
      await first.client.stop();
    }
  });

  it('the internal endpoint refuses unsigned, wrongly signed, stale, replayed, retargeted and forged requests; it is no proxy', async () => {
    const bot = await tunnelBot('cluster-attack', receiver.port);
    const helper = await tunnelBot('cluster-helper', other.port);
    const a = startClient({ server: instances[0]!.url, token: bot.tunnel_token, port: receiver.port });
    const b = startClient({ server: instances[1]!.url, token: helper.tunnel_token, port: other.port });
    try {
      await a.client.waitConnected();
      await b.client.waitConnected();
      await until(
        async () =>
          (await holderOf(bot.hostname)) !== undefined && (await holderOf(helper.hostname)) !== undefined,
        10_000,
      );
      const holder = (await holderOf(bot.hostname))!;
      const otherInstance = (await holderOf(helper.hostname))!.instance_id;
      const port = instances[0]!.port;
      const key = clusterKey(TEST_SECRET_KEY);
      const meta = {
        hostname: bot.hostname,
        method: 'POST',
        path: bot.path,
        headers: [['content-type', 'text/plain']],
        timeout_ms: 2000,
        kind: 'webhook',
      };
      const body = forwardBody(meta, Buffer.from('attack'));
      const count = () => receiver.received.filter((r) => r.body.toString() === 'attack').length;

      const refusals = [
        await internalPost(port, body, {}),
        await internalPost(port, body, { 'x-botpay-cluster': 'v1,t=1,n=00,i=x,s=00' }),
        await internalPost(port, body, {
          'x-botpay-cluster': signRequest(
            clusterKey('another-secret-key-0123456789abcdef0123'),
            holder.instance_id,
            body,
          ),
        }),
        await internalPost(port, body, {
          'x-botpay-cluster': signRequest(key, holder.instance_id, body, Date.now() - 120_000),
        }),
        // Signed for another instance: refused by this one (a signature binds one holder).
        await internalPost(port, body, { 'x-botpay-cluster': signRequest(key, otherInstance, body) }),
        // The hostname changed after signing (forged): the body no longer matches.
        await internalPost(port, forwardBody({ ...meta, hostname: helper.hostname }, Buffer.from('attack')), {
          'x-botpay-cluster': signRequest(key, holder.instance_id, body),
        }),
      ];
      for (const r of refusals) {
        expect(r.status, r.body.toString()).toBe(401);
        expect(r.headers['x-botpay-cluster']).toBeUndefined();
      }
      expect((await internalPost(port, Buffer.alloc(0), {}, 'GET')).status).toBe(405);
      // Through a tunnel hostname the internal path is just a path of the bot's (refused by its policy).
      expect(
        (await hostRequest(port, bot.hostname, { method: 'POST', path: INTERNAL_PATH, body })).status,
      ).toBe(404);
      expect(count()).toBe(0);

      // Correctly signed: delivered once; the same request again is a replay.
      const signature = signRequest(key, holder.instance_id, body);
      const ok = await internalPost(port, body, { 'x-botpay-cluster': signature });
      expect(ok.status).toBe(200);
      expect(count()).toBe(1);
      const replay = await internalPost(port, body, { 'x-botpay-cluster': signature });
      expect(replay.status).toBe(401);
      expect(count()).toBe(1);

      // A signed request for a tunnel this instance does not hold is not passed on (no open proxy).
      const elsewhere = forwardBody({ ...meta, hostname: helper.hostname }, Buffer.from('attack'));
      const answer = await internalPost(port, elsewhere, {
        'x-botpay-cluster': signRequest(key, holder.instance_id, elsewhere),
      });
      expect(answer.status).toBe(200);
      expect(answer.body.toString()).toContain('not_holder');
      expect(other.received.some((r) => r.body.toString() === 'attack')).toBe(false);
      // And for a hostname outside the tunnel domain: refused before anything.
      const foreign = forwardBody({ ...meta, hostname: 'example.com' }, Buffer.from('attack'));
      const bad = await internalPost(port, foreign, {
        'x-botpay-cluster': signRequest(key, holder.instance_id, foreign),
      });
      expect(bad.status).toBe(400);
      expect(count()).toBe(1);
    } finally {
      await a.client.stop();
      await b.client.stop();
    }
  });

  it('deliveries by workers on instances that do not hold the tunnel arrive; the holder killed under load loses nothing', async () => {
    const bot = await tunnelBot('cluster-deliveries', receiver.port);
    const claim = await fetch(`${instances[2]!.url}/api/v1/owner/claims`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${owner.token}` },
      body: JSON.stringify({ claim_token: bot.claim_token }),
    });
    expect(claim.status).toBe(200);
    const { client } = startClient({
      server: `http://127.0.0.1:${balancer.port}`,
      token: bot.tunnel_token,
      port: receiver.port,
      heartbeatMs: 1_000,
    });
    const fund = (i: number) =>
      fetch(`${alive()[i % alive().length]!.url}/api/v1/owner/bots/${bot.bot_id}/wallet/fund`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${owner.token}` },
        body: JSON.stringify({ amount_cents: 100 + i }),
      }).then((r) => r.status);
    const eventsOf = async () =>
      database.db.query<{ event_id: string; status: string; attempts: number }>(
        'SELECT event_id, status, attempts FROM webhook_deliveries WHERE bot_id = $1',
        [bot.bot_id],
      );
    const drained = async () => {
      const rows = await eventsOf();
      const seen = byEvent(receiver.received);
      return rows.length > 0 && rows.every((r) => r.status !== 'pending' && seen.has(r.event_id));
    };
    try {
      await client.waitConnected();
      await until(async () => (await holderOf(bot.hostname))?.internal_url === instances[0]!.url, 10_000);
      // Instance 0 holds the tunnel and runs no worker: these arrive through workers elsewhere.
      for (let i = 0; i < 10; i++) expect(await fund(i)).toBe(200);
      await until(drained, 30_000);
      const firstRound = await eventsOf();
      expect(firstRound.every((r) => r.status === 'delivered')).toBe(true);

      // Under load: fundings keep coming while the holder is killed.
      let stop = false;
      let n = 100;
      const load = (async () => {
        while (!stop) {
          const status = await fund(n++).catch(() => 0);
          if (status !== 200 && status !== 0) throw new Error(`fund answered ${status}`);
          await sleep(50);
        }
      })();
      // And requests to the bot's hostname through every instance, answered by whoever holds it.
      const statuses = new Map<number, number>();
      const requests = (async () => {
        for (let i = 0; !stop; i++) {
          const s = alive()[i % alive().length]!;
          const status = await hostRequest(s.port, bot.hostname, {
            method: 'POST',
            path: bot.path,
            body: `r${i}`,
          })
            .then((r) => r.status)
            .catch(() => 0);
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
          await sleep(20);
        }
      })();
      await sleep(1_500);
      const holder = instanceAt((await holderOf(bot.hostname))!.internal_url);
      holder.child.kill('SIGKILL');
      await holder.exited;
      await until(async () => {
        const lease = await holderOf(bot.hostname);
        return lease !== undefined && lease.internal_url !== holder.url && client.connected;
      }, 20_000);
      await sleep(1_500);
      stop = true;
      await load;
      await requests;
      // 0: the killed instance itself; 502: between the kill and the reconnection. Never a 500.
      expect(
        [...statuses.keys()].every((k) => [0, 200, 502].includes(k)),
        JSON.stringify([...statuses]),
      ).toBe(true);
      expect(statuses.get(200) ?? 0).toBeGreaterThan(0);

      await until(drained, 60_000);
      const rows = await eventsOf();
      const seen = byEvent(receiver.received);
      expect(rows.length).toBeGreaterThan(20);
      const duplicates = rows.filter((r) => (seen.get(r.event_id) ?? 0) > 1).length;
      const retried = rows.filter((r) => r.attempts > 1).length;
      console.log(
        `holder killed: ${rows.length} events, ${retried} retried, ${duplicates} received twice; requests ${JSON.stringify(Object.fromEntries(statuses))}`,
      );
      for (const r of rows) {
        expect(r.status, r.event_id).toBe('delivered');
        // At least once, and never more often than it was attempted.
        expect(seen.get(r.event_id) ?? 0, r.event_id).toBeGreaterThanOrEqual(1);
        expect(seen.get(r.event_id)!, r.event_id).toBeLessThanOrEqual(r.attempts);
      }
      // Requests through every surviving instance reach the new holder.
      for (const s of alive()) {
        const res = await hostRequest(s.port, bot.hostname, {
          method: 'POST',
          path: bot.path,
          body: 'after',
        });
        expect(res.status).toBe(200);
      }
    } finally {
      await client.stop();
    }
  }, 180_000);
});
