import { AsyncResource } from 'node:async_hooks';
import { request } from 'node:http';
import Fastify, { type FastifyInstance } from 'fastify';
import { describe, expect, it } from 'vitest';
import { SessionGate } from '../../src/platform/db/gate.ts';
import { trackRequestWork } from '../../src/platform/overload.ts';

// The app's first hook (trackRequestWork, src/platform/overload.ts) marks a request's work for the
// sessions gate through Fastify's hooks and body parsing: a POST whose handler had its first
// session, then meets a full gate for its second, waits its turn rather than being refused
// `overloaded` after it may have changed something. Without the hook, the same handler is refused:
// the gate cannot tell a request's later statement from a new request's first.

// Another request's (or a job's) statement: run in a scope that is not this request's.
const elsewhere = new AsyncResource('test.elsewhere');

async function appWith(track: boolean) {
  const gate = new SessionGate(1, 30);
  let holderRelease: (() => void) | undefined;
  const app = Fastify();
  if (track) trackRequestWork(app);
  app.post('/work', async (request) => {
    // The body went through the parser: the handler runs from the request stream's end event.
    expect((request.body as { n: number }).n).toBe(1);
    if (!gate.tryAcquire()) await gate.acquire();
    gate.release(); // the first statement (say, the purchase) committed
    // Another statement takes the only session and keeps it past the bound.
    if (!elsewhere.runInAsyncScope(() => gate.tryAcquire())) throw new Error('the gate should be free here');
    holderRelease = () => elsewhere.runInAsyncScope(() => gate.release());
    if (track) setTimeout(() => holderRelease?.(), 150);
    try {
      await gate.acquire(); // the handler's second statement
    } catch (error) {
      holderRelease();
      throw error;
    }
    gate.release();
    return { ok: true };
  });
  return { app, gate };
}

/**
 * Over a real socket, the body sent 50 ms after the headers (flushed first): it then arrives in the
 * connection's async context, not the one the first hook ran in (a body that came with the headers
 * would be read on from the hook's own context and prove nothing).
 */
async function post(app: FastifyInstance): Promise<{ status: number; body: unknown }> {
  const base = new URL(await app.listen({ port: 0, host: '127.0.0.1' }));
  const payload = JSON.stringify({ n: 1 });
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: base.hostname,
        port: base.port,
        method: 'POST',
        path: '/work',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.flushHeaders();
    setTimeout(() => req.end(payload), 50);
  });
}

describe('a request admitted through Fastify is not refused half-way', () => {
  it('waits for its second session past the bound with the hook, and is refused without it', async () => {
    const tracked = await appWith(true);
    const done = await post(tracked.app);
    expect(done).toEqual({ status: 200, body: { ok: true } });
    expect(tracked.gate.load()).toMatchObject({ inUse: 0, refused: 0 });
    await tracked.app.close();

    const untracked = await appWith(false);
    const refused = await post(untracked.app);
    expect(refused.status).toBe(503);
    expect(untracked.gate.load()).toMatchObject({ inUse: 0, refused: 1 });
    await untracked.app.close();
  });
});
