import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type WebSocket from 'ws';
import type { TunnelRelay } from '../../src/tunnels/relay.ts';
import type { TestService } from '../support/service.ts';
import {
  hostRequest,
  registerTunnelBot,
  startClient,
  type startReceiver,
  startRelayService,
  until,
} from './helpers.ts';

// Issue 14 item 4: a tunnel client that stops reading must not make the service queue every frame
// (before: 672 → 1,052 MB after 300 × 1 MB requests). What waits for one tunnel's socket is bounded
// (the WebSocket's bufferedAmount plus the bodies being read for it); above the bound the relay
// answers 503 service_unavailable at once. A real client whose socket is paused plays the tunnel
// that stopped reading; the requests are real 1 MB POSTs over loopback.

const MB = 1_048_576;
const BOUND = 8 * MB;

describe('a tunnel client that stops reading', () => {
  let svc: TestService;
  let port: number;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  let close: () => Promise<void>;

  beforeAll(async () => {
    ({ svc, port, receiver, close } = await startRelayService({
      WEBHOOK_TIMEOUT_MS: '2000',
      LOG_LEVEL: 'silent',
    }));
  });
  afterAll(() => close());

  it('bounds what is queued for it and answers 503 above the bound; the tunnel recovers when it reads again', async () => {
    const relay = svc.ctx.tunnelRelay as TunnelRelay;
    const bot = await registerTunnelBot(svc, receiver.port, {}, { forward: 'webhook_only' });
    const { client } = startClient({
      server: `http://127.0.0.1:${port}`,
      token: bot.tunnel_token,
      port: receiver.port,
    });
    try {
      await client.waitConnected();
      expect(
        (await hostRequest(port, bot.hostname, { method: 'POST', path: bot.webhook_path, body: 'ok' }))
          .status,
      ).toBe(200);

      // The client stops reading: its socket is paused, TCP windows fill, frames wait in the service.
      const socket = (client as unknown as { ws: WebSocket & { _socket: { pause(): void; resume(): void } } })
        .ws._socket;
      socket.pause();

      let maxQueued = 0;
      const sampler = setInterval(() => {
        maxQueued = Math.max(maxQueued, relay.queuedBytes(bot.hostname));
      }, 5);
      const rssBefore = process.memoryUsage().rss;
      const body = Buffer.alloc(MB - 1024, 0x61);
      const statuses: number[] = [];
      const bodies: string[] = [];
      // 60 × 1 MB, 12 at a time (each waits for its answer: 503 at once, or 504 after the timeout).
      let next = 0;
      await Promise.all(
        Array.from({ length: 12 }, async () => {
          while (next < 60) {
            next++;
            const res = await hostRequest(port, bot.hostname, {
              method: 'POST',
              path: bot.webhook_path,
              body,
            });
            maxQueued = Math.max(maxQueued, relay.queuedBytes(bot.hostname));
            statuses.push(res.status);
            bodies.push(res.body.toString());
          }
        }),
      );
      clearInterval(sampler);
      const rssGrowthMb = (process.memoryUsage().rss - rssBefore) / MB;
      console.log(
        `paused tunnel: max queued ${(maxQueued / MB).toFixed(1)} MB, rss +${rssGrowthMb.toFixed(0)} MB, statuses ${JSON.stringify(
          Object.fromEntries([...new Set(statuses)].map((s) => [s, statuses.filter((x) => x === s).length])),
        )}`,
      );

      expect(maxQueued).toBeLessThanOrEqual(BOUND + 64 * 1024);
      expect(statuses.filter((s) => s === 503).length).toBeGreaterThan(30);
      expect(statuses.every((s) => s === 503 || s === 504)).toBe(true);
      const refused = bodies[statuses.indexOf(503)]!;
      expect(JSON.parse(refused)).toEqual({
        error: 'service_unavailable',
        message: expect.stringMatching(/not reading/),
      });

      // Reading again: the queue drains and requests flow.
      socket.resume();
      await until(async () => {
        const res = await hostRequest(port, bot.hostname, {
          method: 'POST',
          path: bot.webhook_path,
          body: 'again',
        });
        return res.status === 200 && res.body.toString() === 'again';
      }, 20_000);
      expect(relay.queuedBytes(bot.hostname)).toBeLessThan(MB);
    } finally {
      await client.stop();
    }
  });
});
