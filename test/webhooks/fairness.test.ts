import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { backlog, emit, type Received, Receiver } from './helpers.ts';

// Healthy bots' deliveries are not held up by other bots' receivers that hang or fail (issue 32).
// A hanging receiver never answers (WEBHOOK_TIMEOUT_MS is a minute here, longer than the test), so
// the question is categorical, not a timing: are the healthy bots' events delivered while every
// hanging request is still open, or only once hanging attempts time out and give their slots back?
// The hanging bots have a backlog of due deliveries older than every healthy event, larger than
// what one claim looks at (200 candidates): the claim must not spend its window on bots that can
// take nothing more anywhere in the deployment.

/** Deliveries per hanging bot, due before anything else. */
const BACKLOG = 250;

describe('webhook delivery fairness', () => {
  let svc: TestService;
  let receiver: Receiver;
  const hanging = new Set<ServerResponse>();
  let closedHanging = 0;
  /** While a test winds down: hanging receivers fail at once instead (the workers can stop). */
  let windingDown = false;

  beforeAll(async () => {
    svc = await createTestService({ env: { WEBHOOK_TIMEOUT_MS: '60000', WEBHOOK_RETRY_DELAYS: '3600' } });
    receiver = await new Receiver().start();
    receiver.respond = (req, res) => {
      if (req.url.startsWith('/hang') && !windingDown) {
        hanging.add(res);
        res.once('close', () => {
          if (hanging.delete(res)) closedHanging++;
        });
        return;
      }
      const fail = req.url.startsWith('/fail') || req.url.startsWith('/hang');
      res.writeHead(fail ? 500 : 200);
      res.end(fail ? 'no' : 'ok');
    };
  });
  /** Ends the hanging requests (not counted as closed by the worker), stops `workers`, starts afresh. */
  async function windDown(...workers: DeliveryWorker[]): Promise<void> {
    windingDown = true;
    const open = [...hanging];
    hanging.clear();
    for (const res of open) res.destroy();
    await Promise.all(workers.map((w) => w.stop()));
    // What the stopped workers left due is not the next test's business.
    await svc.ctx.db.query(`UPDATE webhook_deliveries SET status = 'failed' WHERE status = 'pending'`);
    windingDown = false;
    closedHanging = 0;
  }

  afterAll(async () => {
    await windDown();
    await receiver.close();
    await svc.close();
  });

  async function bots(path: string, n: number): Promise<string[]> {
    const owner = await createOwner(svc);
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      ids.push(
        (await activeBot(svc, owner, { body: { callback_url: receiver.url(`${path}/${i}`) } })).bot_id,
      );
    }
    return ids;
  }

  const healthyArrived = (rs: Received[], ids: Set<string>) =>
    rs.filter((r) => r.url.startsWith('/ok') && ids.has(String(r.headers['x-service-event-id']))).length;

  it('two instances: a hanging bot held by one does not fill the other’s claims; healthy bots are served while it hangs', {
    timeout: 90_000,
  }, async () => {
    const [a, b] = [0, 1].map(
      () => new DeliveryWorker(svc.ctx, { pollMs: 50, maxInFlight: 3, perBotInFlight: 2 }),
    ) as [DeliveryWorker, DeliveryWorker];
    const stuck = await bots('/hang-two', 2);
    const ok = await bots('/ok-two', 2);
    for (const id of stuck) await backlog(svc, id, BACKLOG);
    // The first instance alone: it takes the first hanging bot to its bound and a slot of the second.
    await a.start();
    try {
      await receiver.waitFor((rs) => rs.filter((r) => r.url.startsWith('/hang-two')).length >= 3, 15_000);
      await b.start();
      const ids = new Set<string>();
      for (const id of ok) for (let i = 0; i < 3; i++) ids.add((await emit(svc, id)).id);
      await receiver.waitFor((rs) => healthyArrived(rs, ids) === ids.size, 50_000);
      expect(closedHanging).toBe(0);
      expect(hanging.size).toBeGreaterThanOrEqual(4);
    } finally {
      await windDown(a, b);
    }
  });

  it('one instance: 5 hanging and 5 failing receivers with backlogs; healthy bots are served while they hang', {
    timeout: 90_000,
  }, async () => {
    const worker = new DeliveryWorker(svc.ctx, { pollMs: 50 });
    const stuck = await bots('/hang-one', 5);
    const failing = await bots('/fail-one', 5);
    const ok = await bots('/ok-one', 5);
    for (const id of stuck) await backlog(svc, id, BACKLOG);
    for (const id of failing) await backlog(svc, id, 20);
    await worker.start();
    try {
      const ids = new Set<string>();
      for (const id of ok) for (let i = 0; i < 5; i++) ids.add((await emit(svc, id)).id);
      await receiver.waitFor((rs) => healthyArrived(rs, ids) === ids.size, 50_000);
      expect(closedHanging).toBe(0);
      // Every hanging bot holds its bound, no more.
      expect(hanging.size).toBeLessThanOrEqual(5 * 8);
    } finally {
      await windDown(worker);
    }
  });
});
