import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/platform/clock.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { splitCard } from '../support/cards.ts';
import { createOwner, createTestService, registerBot, type TestService } from '../support/service.ts';

// Issue 33, item 4: every retry waits at least its configured delay. The scenario of the report, on
// the running worker (its loop, NOTIFY wake-ups and recording calls that claim, as in production):
// bots registered with a callback, claimed, funded and given a card, all at once, against a
// receiver on loopback that answers 500, with WEBHOOK_RETRY_DELAYS=1,1. Attempts are counted by
// `webhook-id` at the receiver. The worker's clock is the wall clock here (a retry's delay is
// counted from when its failure was recorded, after the attempt arrived): load can only make the
// gaps longer, so the check below cannot fail by chance, only if an attempt is sent early or twice.

class WallClock extends FakeClock {
  override now(): number {
    return Date.now();
  }
}

const BOTS = 6;
const DELAY_MS = 1000;

let svc: TestService;
let server: ReturnType<typeof createServer>;
const arrivals = new Map<string, number[]>();

beforeAll(async () => {
  svc = await createTestService({
    clock: new WallClock(),
    env: { WEBHOOK_RETRY_DELAYS: '1,1', REGISTRATION_RATE_LIMIT_PER_HOUR: '1000' },
  });
  server = createServer((req, res) => {
    const id = `${req.headers['x-service-event']} ${req.headers['webhook-id']}`;
    arrivals.set(id, [...(arrivals.get(id) ?? []), Date.now()]);
    req.resume();
    res.writeHead(500, { 'content-type': 'text/plain' });
    res.end('failing on purpose');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
});
afterAll(async () => {
  server.closeAllConnections();
  server.close();
  await svc.close();
});

describe('webhook retries', () => {
  it('each of the three attempts of every event comes at least its delay after the one before', async () => {
    const worker = new DeliveryWorker(svc.ctx);
    await worker.start();
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
      await Promise.all(
        Array.from({ length: BOTS }, async () => {
          // An owner each: one owner's second card like the first would be asked whether it is the same card.
          const owner = await createOwner(svc);
          const bot = await registerBot(svc, { owner_email: owner.email, callback_url: url });
          const call = (path: string, payload: unknown) =>
            svc.app.inject({ method: 'POST', url: path, headers: owner.auth, payload: payload as object });
          await call('/api/v1/owner/claims', { claim_token: bot.claim_token });
          await call(`/api/v1/owner/bots/${bot.bot_id}/wallet/fund`, { amount_cents: 1000 });
          const card = (await call(`/api/v1/owner/bots/${bot.bot_id}/cards`, {})).json();
          const activated = await call(
            `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}/activate`,
            splitCard(card).activation,
          );
          expect(activated.statusCode).toBe(200);
        }),
      );
      // wallet.activated and wallet.funded of each bot: 1 attempt + 2 retries each, then failed.
      const deadline = Date.now() + 20_000;
      while (Date.now() < deadline) {
        const [row] = await svc.ctx.db.query<{ open: number }>(
          `SELECT count(*)::int AS open FROM webhook_deliveries WHERE status = 'pending'`,
        );
        if (row!.open === 0) break;
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await worker.stop();
    }
    expect(arrivals.size).toBe(2 * BOTS);
    for (const [id, times] of arrivals) {
      expect(times, id).toHaveLength(3);
      for (let i = 1; i < times.length; i++) {
        expect(
          times[i]! - times[i - 1]!,
          `${id}: attempt ${i + 1} after attempt ${i}`,
        ).toBeGreaterThanOrEqual(DELAY_MS);
      }
    }
  }, 60_000);
});
