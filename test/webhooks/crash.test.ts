import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionFor, isPostgres } from '../support/db.ts';
import { startServiceProcess } from '../support/process.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  TEST_SECRET_KEY,
  type TestService,
} from '../support/service.ts';
import { emit, Receiver } from './helpers.ts';

// The worker runs in a real child service process that is SIGKILLed while deliveries are in flight
// (the receiver holds every answer for a while). A second process must deliver every event at least
// once: the killed process's leases expire (2 × WEBHOOK_TIMEOUT_MS + 5 s) and the work is claimed again.
describe.runIf(isPostgres)('crash while deliveries are in flight', () => {
  let svc: TestService;
  let receiver: Receiver;

  beforeAll(async () => {
    svc = await createTestService();
    receiver = await new Receiver().start();
  });
  afterAll(async () => {
    await receiver.close();
    await svc.close();
  });

  it('after SIGKILL and restart every event is delivered at least once', { timeout: 90_000 }, async () => {
    const owners = await Promise.all([createOwner(svc), createOwner(svc)]);
    const bots = [];
    for (const owner of owners)
      bots.push(await activeBot(svc, owner, { body: { callback_url: receiver.url('/crash') } }));
    // Event timestamps must not be in the child's future: it uses the real clock.
    svc.clock.set(Date.now() - 1000);
    const ids = new Set<string>();
    const [activation] = await svc.ctx.db.query<{ n: number }>('SELECT count(*)::int AS n FROM events');
    for (let i = 0; i < 150; i++) ids.add((await emit(svc, bots[i % 2]!.bot_id, 'rails.updated', { i })).id);
    await svc.ctx.db.exec(`UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 second'`);
    expect(activation!.n).toBe(2);

    let holding = true;
    receiver.respond = (_req, res) => {
      const answer = () => {
        res.writeHead(200);
        res.end('ok');
      };
      if (holding) setTimeout(answer, 300);
      else answer();
    };
    const env = {
      DATABASE_URL: connectionFor(svc.database.schema!),
      SECRET_KEY: TEST_SECRET_KEY,
      ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
      WEBHOOK_TIMEOUT_MS: '1500',
      // An attempt that times out on a loaded machine is retried within the test's wait, not after
      // the default 60 s (what is checked is that a crash loses nothing, not the retry schedule).
      WEBHOOK_RETRY_DELAYS: '1,1,1,1,1,1,1,1',
      ROLES: 'api,worker',
    };
    const first = await startServiceProcess(env);
    await receiver.waitFor((rs) => rs.length >= 20, 30_000);
    first.child.kill('SIGKILL');
    expect(await first.exited).toBe('SIGKILL');
    const sentBeforeCrash = receiver.requests.length;
    const [inFlight] = await svc.ctx.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM webhook_queue q JOIN webhook_deliveries d ON d.id = q.delivery_id
        WHERE d.status = 'pending' AND q.lock_token IS NOT NULL`,
    );
    // The crash really hit deliveries that were sent (or being sent) but not recorded.
    expect(inFlight!.n).toBeGreaterThan(0);
    expect(sentBeforeCrash).toBeLessThan(152);

    holding = false;
    const second = await startServiceProcess(env);
    try {
      const allIds = () => new Set(receiver.requests.map((r) => JSON.parse(r.body).id as string));
      await receiver.waitFor(() => [...ids].every((id) => allIds().has(id)), 45_000);
      // And the database agrees: every delivery recorded as delivered.
      const deadline = Date.now() + 15_000;
      let rows: Array<{ status: string; n: number }> = [];
      while (Date.now() < deadline) {
        rows = await svc.ctx.db.query<{ status: string; n: number }>(
          'SELECT status, count(*)::int AS n FROM webhook_deliveries GROUP BY status',
        );
        const [queued] = await svc.ctx.db.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM webhook_queue',
        );
        if (rows.length === 1 && rows[0]!.status === 'delivered' && queued!.n === 0) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(rows).toEqual([{ status: 'delivered', n: 152 }]);
      // Nothing left in the queue (0046): the crashed instance's leases were taken back and settled.
      expect(await svc.ctx.db.query('SELECT delivery_id FROM webhook_queue')).toEqual([]);
      // Every event's delivery says when it arrived (the event row is not written since 0052).
      const [undelivered] = await svc.ctx.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM events e LEFT JOIN webhook_deliveries d ON d.event_id = e.id
          WHERE d.delivered_at IS NULL`,
      );
      expect(undelivered!.n).toBe(0);
    } finally {
      second.child.kill('SIGTERM');
      await second.exited;
    }
  });
});
