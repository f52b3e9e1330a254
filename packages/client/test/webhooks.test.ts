import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import type { WebhookEvent } from '../src/types.ts';
import { expressWebhook } from '../src/webhooks/express.ts';
import { fastifyWebhook } from '../src/webhooks/fastify.ts';
import { createNodeWebhookHandler } from '../src/webhooks/node.ts';
import {
  type DedupeStore,
  MemoryDedupeStore,
  type WebhookReceiverOptions,
} from '../src/webhooks/receiver.ts';
import { signPayload, signStandard } from '../src/webhooks/verify.ts';

// Each middleware behind a real server on 127.0.0.1, fed deliveries shaped like the service's
//.

const SECRET = `whsec_${'7e'.repeat(24)}`;

/** Both signature schemes, as the service sends them (timestamp = now unless given). */
function signed(body: string, secret: string, id: string, at = Math.floor(Date.now() / 1000)) {
  return {
    'x-service-signature': signPayload(body, secret),
    'webhook-id': id,
    'webhook-timestamp': String(at),
    'webhook-signature': signStandard(body, secret, id, at),
  };
}

function delivery(id = `evt_${Math.random().toString(36).slice(2)}`, event = 'wallet.funded') {
  const body = JSON.stringify({
    id,
    event,
    timestamp: '2026-01-05T12:00:00.000Z',
    bot_id: 'bot_abc',
    data: { amount_usd: 25 },
  });
  return {
    id,
    body,
    headers: {
      'content-type': 'application/json',
      ...signed(body, SECRET, id),
      'x-service-event': event,
      'x-service-event-id': id,
    } as Record<string, string>,
  };
}

interface Harness {
  url: string;
  close(): Promise<void>;
}

type Mount = (options: WebhookReceiverOptions) => Promise<Harness>;

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

const mounts: Record<string, Mount> = {
  'node http': async (options) => {
    const handler = createNodeWebhookHandler(options);
    const server = createServer((req, res) => {
      if (req.url === '/webhook') return handler(req, res);
      res.writeHead(404).end();
    });
    return { url: `${await listen(server)}/webhook`, close: () => closeServer(server) };
  },
  'express 5': async (options) => {
    const app = express();
    app.post('/webhook', expressWebhook(options));
    app.use(express.json());
    app.post('/other', (req, res) => {
      res.json({ echoed: req.body });
    });
    const server = createServer(app);
    return { url: `${await listen(server)}/webhook`, close: () => closeServer(server) };
  },
  fastify: async (options) => {
    const app = Fastify();
    await app.register(fastifyWebhook, { ...options, path: '/webhook' });
    app.post('/other', async (request) => ({ echoed: request.body }));
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    return { url: `${address}/webhook`, close: () => app.close() };
  },
};

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

function collector() {
  const events: WebhookEvent[] = [];
  let notify: () => void = () => {};
  return {
    events,
    onEvent: (event: WebhookEvent) => {
      events.push(event);
      notify();
    },
    next: () =>
      new Promise<void>((resolve) => {
        notify = resolve;
      }),
  };
}

const post = (url: string, body: string, headers: Record<string, string>) =>
  fetch(url, { method: 'POST', body, headers });

describe.each(Object.entries(mounts))('%s middleware', (_name, mount) => {
  it('verifies, answers 200 and hands the parsed event to the handler once', async () => {
    const seen = collector();
    harness = await mount({ secret: SECRET, onEvent: seen.onEvent });
    const d = delivery();
    const arrived = seen.next();
    const res = await post(harness.url, d.body, d.headers);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ received: true });
    await arrived;
    expect(seen.events).toEqual([JSON.parse(d.body)]);

    // A redelivery of the same event is acknowledged but not handled again.
    const again = await post(harness.url, d.body, d.headers);
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ received: true, duplicate: true });
    const other = delivery();
    const arrivedOther = seen.next();
    await post(harness.url, other.body, other.headers);
    await arrivedOther;
    expect(seen.events.map((e) => e.id)).toEqual([d.id, other.id]);
  });

  it('answers before the handler finishes (processing is asynchronous)', async () => {
    let release: () => void = () => {};
    let finished = false;
    harness = await mount({
      secret: SECRET,
      onEvent: async () => {
        await new Promise<void>((resolve) => {
          release = resolve;
        });
        finished = true;
      },
    });
    const d = delivery();
    const res = await post(harness.url, d.body, d.headers);
    expect(res.status).toBe(200);
    expect(finished).toBe(false);
    release();
  });

  it('refuses a wrong, missing or malformed signature with 401 and never calls the handler', async () => {
    const seen = collector();
    harness = await mount({ secret: SECRET, onEvent: seen.onEvent });
    const d = delivery();
    const tampered = d.body.replace('25', '2500');
    const now = Math.floor(Date.now() / 1000);
    const cases: [string, Record<string, string | undefined>, string][] = [
      // The body changed after signing: both schemes fail.
      [tampered, {}, 'invalid_signature'],
      // Signed with another secret.
      [d.body, signed(d.body, 'whsec_other', d.id), 'invalid_signature'],
      // A valid Standard Webhooks signature but a forged X-Service-Signature.
      [d.body, { 'x-service-signature': signPayload(d.body, 'whsec_other') }, 'invalid_signature'],
      [d.body, { 'x-service-signature': 'sha256=nothex' }, 'invalid_signature'],
      [d.body, { 'webhook-signature': 'v1,bm90IGEgc2lnbmF0dXJl' }, 'invalid_signature'],
      // The signature of another message id (headers swapped between deliveries).
      [d.body, { 'webhook-id': 'evt_other' }, 'invalid_signature'],
      // Replay protection: a genuine delivery captured 10 minutes ago, or dated in the future.
      [d.body, signed(d.body, SECRET, d.id, now - 600), 'timestamp_out_of_tolerance'],
      [d.body, signed(d.body, SECRET, d.id, now + 600), 'timestamp_out_of_tolerance'],
      [d.body, { 'webhook-timestamp': 'yesterday' }, 'invalid_timestamp'],
      // Stripping the Standard Webhooks headers (to replay with X-Service-Signature alone).
      [d.body, { 'webhook-signature': undefined }, 'missing_headers'],
      [
        d.body,
        { 'webhook-signature': undefined, 'webhook-timestamp': undefined, 'webhook-id': undefined },
        'missing_headers',
      ],
    ];
    for (const [body, changes, error] of cases) {
      const headers: Record<string, string> = { ...d.headers };
      for (const [name, value] of Object.entries(changes)) {
        if (value === undefined) delete headers[name];
        else headers[name] = value;
      }
      const res = await post(harness.url, body, headers);
      expect(res.status, JSON.stringify(changes)).toBe(401);
      expect(await res.json()).toEqual({ error });
    }
    // A bad attempt must not poison deduplication: the genuine delivery is still handled.
    const arrived = seen.next();
    expect((await post(harness.url, d.body, d.headers)).status).toBe(200);
    await arrived;
    expect(seen.events).toHaveLength(1);
  });

  it('accepts the new and the previous secret during a rotation, and X-Service-Signature alone only when allowed', async () => {
    const seen = collector();
    const NEW = `whsec_${'4f'.repeat(24)}`;
    harness = await mount({ secret: [NEW, SECRET], onEvent: seen.onEvent });
    const d = delivery();
    // The service signs with both secrets while the overlap lasts; a receiver with either verifies.
    const at = Math.floor(Date.now() / 1000);
    const both = {
      ...d.headers,
      'x-service-signature': signPayload(d.body, NEW),
      'webhook-signature': `${signStandard(d.body, NEW, d.id, at)} ${signStandard(d.body, SECRET, d.id, at)}`,
      'webhook-timestamp': String(at),
    };
    expect((await post(harness.url, d.body, both)).status).toBe(200);
    await harness.close();
    harness = await mount({ secret: SECRET, onEvent: seen.onEvent });
    const old = delivery();
    const withBoth = {
      ...old.headers,
      'x-service-signature': signPayload(old.body, SECRET),
      'webhook-signature': `${signStandard(old.body, NEW, old.id, at)} ${signStandard(old.body, SECRET, old.id, at)}`,
      'webhook-timestamp': String(at),
    };
    expect((await post(harness.url, old.body, withBoth)).status).toBe(200);
    await harness.close();
    harness = await mount({ secret: SECRET, onEvent: seen.onEvent, allowUnsignedTimestamp: true });
    const legacy = delivery();
    const legacyHeaders = {
      'content-type': 'application/json',
      'x-service-signature': signPayload(legacy.body, SECRET),
    };
    expect((await post(harness.url, legacy.body, legacyHeaders)).status).toBe(200);
  });

  it('refuses a signed body that is not JSON (400) and one over the size limit (413)', async () => {
    const seen = collector();
    harness = await mount({ secret: SECRET, onEvent: seen.onEvent, maxBodyBytes: 1024 });
    const notJson = 'not json';
    const res = await post(harness.url, notJson, {
      'content-type': 'application/json',
      ...signed(notJson, SECRET, 'evt_notjson'),
    });
    expect(res.status).toBe(400);
    const big = JSON.stringify({ id: 'evt_big', event: 'x', pad: 'a'.repeat(2048) });
    const tooBig = await post(harness.url, big, {
      'content-type': 'application/json',
      ...signed(big, SECRET, 'evt_big'),
    });
    expect(tooBig.status).toBe(413);
    expect(seen.events).toEqual([]);
  });

  it('checks the hooks token of primary tunnel deliveries when configured', async () => {
    const seen = collector();
    const token = `svc_hooks_${'1'.repeat(48)}`;
    harness = await mount({ secret: SECRET, onEvent: seen.onEvent, hooksToken: token });
    const d = delivery();
    expect((await post(harness.url, d.body, d.headers)).status).toBe(401);
    expect((await post(harness.url, d.body, { ...d.headers, authorization: 'Bearer wrong' })).status).toBe(
      401,
    );
    const arrived = seen.next();
    expect((await post(harness.url, d.body, { ...d.headers, authorization: `Bearer ${token}` })).status).toBe(
      200,
    );
    await arrived;
    expect(seen.events).toHaveLength(1);
  });

  it('forgets a failed event so a manual redelivery is processed again, and reports the failure', async () => {
    const failures: unknown[] = [];
    let calls = 0;
    let notify: () => void = () => {};
    harness = await mount({
      secret: SECRET,
      onEvent: () => {
        calls++;
        notify();
        if (calls === 1) throw new Error('database down');
      },
      onError: (error) => failures.push(error),
    });
    const d = delivery();
    const first = new Promise<void>((r) => {
      notify = r;
    });
    await post(harness.url, d.body, d.headers);
    await first;
    await new Promise((r) => setTimeout(r, 20));
    expect(failures).toHaveLength(1);
    const second = new Promise<void>((r) => {
      notify = r;
    });
    expect(await (await post(harness.url, d.body, d.headers)).json()).toEqual({ received: true });
    await second;
    expect(calls).toBe(2);
  });

  it('uses a pluggable dedupe store', async () => {
    const shared = new Set<string>(['evt_known']);
    const store: DedupeStore = {
      markIfNew: async (id) => {
        if (shared.has(id)) return false;
        shared.add(id);
        return true;
      },
      forget: async (id) => {
        shared.delete(id);
      },
    };
    const seen = collector();
    harness = await mount({ secret: SECRET, onEvent: seen.onEvent, dedupe: store });
    const known = delivery('evt_known');
    expect(await (await post(harness.url, known.body, known.headers)).json()).toEqual({
      received: true,
      duplicate: true,
    });
    const fresh = delivery('evt_fresh');
    const arrived = seen.next();
    await post(harness.url, fresh.body, fresh.headers);
    await arrived;
    expect(shared.has('evt_fresh')).toBe(true);
    expect(seen.events.map((e) => e.id)).toEqual(['evt_fresh']);
  });
});

describe('framework integration details', () => {
  it('express: reports a clear error when express.json() consumed the body first', async () => {
    const app = express();
    app.use(express.json());
    app.post('/webhook', expressWebhook({ secret: SECRET, onEvent: () => {} }));
    let reported: unknown;
    app.use((error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      reported = error;
      res.status(500).json({ error: 'misconfigured' });
    });
    const server = createServer(app);
    const url = await listen(server);
    harness = { url, close: () => closeServer(server) };
    const d = delivery();
    expect((await post(`${url}/webhook`, d.body, d.headers)).status).toBe(500);
    expect(String(reported)).toContain('raw body');
  });

  it('express and fastify: the rest of the app still parses JSON normally', async () => {
    for (const name of ['express 5', 'fastify']) {
      const h = await mounts[name]!({ secret: SECRET, onEvent: () => {} });
      const res = await post(h.url.replace('/webhook', '/other'), '{"a":1}', {
        'content-type': 'application/json',
      });
      expect(await res.json()).toEqual({ echoed: { a: 1 } });
      await h.close();
    }
  });

  it('node: answers 405 to anything but POST', async () => {
    harness = await mounts['node http']!({ secret: SECRET, onEvent: () => {} });
    expect((await fetch(harness.url)).status).toBe(405);
  });
});

describe('MemoryDedupeStore', () => {
  it('remembers the most recent ids up to its capacity', () => {
    const store = new MemoryDedupeStore(3);
    expect(['a', 'b', 'c'].map((id) => store.markIfNew(id))).toEqual([true, true, true]);
    expect(store.markIfNew('a')).toBe(false); // refreshes a
    expect(store.markIfNew('d')).toBe(true); // evicts b, the least recent
    expect(store.size).toBe(3);
    expect(store.markIfNew('b')).toBe(true);
    expect(store.markIfNew('a')).toBe(false);
  });
});
