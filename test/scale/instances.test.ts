import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionFor, createTestDatabase, isPostgres, type TestDatabase } from '../support/db.ts';
import { type ServiceProcess, startServiceProcess } from '../support/process.ts';
import { TEST_SECRET_KEY } from '../support/service.ts';
import { Receiver } from '../webhooks/helpers.ts';
import {
  type Answer,
  call,
  expectCountersMatchConfirmations,
  expectLedgerBalanced,
  expectOneMovementPerConfirmation,
  ownerToken,
  purchase,
  putGuardrails,
  type ScaleBot,
  setupBot,
  sleep,
  waitForDrain,
} from './helpers.ts';

// Three real `botpay serve` processes with mixed roles share nothing but one PostgreSQL schema
// (each its own port, its own memory). Every request below goes over HTTP to one of them, spread
// round-robin, so each guarantee is shown across instances: the registration limit is shared,
// wallets and budgets are never overspent, a hold is decided once (even when two instances are
// asked at the same moment), expiry happens once, and each webhook delivery attempt is sent by one
// instance only. The webhook receiver is a real HTTP server on 127.0.0.1.

const REGISTRATION_LIMIT = 4;
const APPROVAL_WINDOW_SECONDS = 3;
const ROLES = ['api,worker', 'api,scheduler,tunnel', 'api,worker,scheduler'];

/** The deliveries whose first attempt the receiver answers 500 (about one in four, by id). */
function failFirst(deliveryId: string): boolean {
  let h = 0;
  for (const ch of deliveryId) h = (h * 31 + ch.charCodeAt(0)) | 0;
  return (h & 3) === 0;
}

describe.runIf(isPostgres)('three instances on one PostgreSQL', () => {
  let database: TestDatabase;
  let receiver: Receiver;
  const instances: ServiceProcess[] = [];
  let urls: string[] = [];
  let ipCounter = 0;
  const nextIp = () => {
    ipCounter++;
    return `10.77.${ipCounter >> 8}.${ipCounter & 255}`;
  };

  beforeAll(async () => {
    database = await createTestDatabase({ poolSize: 4 });
    receiver = await new Receiver().start();
    const seen = new Set<string>();
    receiver.respond = (req, res) => {
      const id = String(req.headers['x-service-delivery-id']);
      const fail = failFirst(id) && !seen.has(id);
      seen.add(id);
      res.writeHead(fail ? 500 : 200, { 'content-type': 'text/plain' });
      res.end(fail ? 'try again' : 'ok');
    };
    const env = {
      DATABASE_URL: connectionFor(database.schema!),
      SECRET_KEY: TEST_SECRET_KEY,
      ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
      TRUST_PROXY: 'true',
      REGISTRATION_RATE_LIMIT_PER_HOUR: String(REGISTRATION_LIMIT),
      CHECKOUT_RATE_LIMIT_PER_HOUR: '100000',
      APPROVAL_WINDOW_SECONDS: String(APPROVAL_WINDOW_SECONDS),
      WEBHOOK_TIMEOUT_MS: '5000',
      WEBHOOK_RETRY_DELAYS: '1,1,1,1,1',
    };
    const started = await Promise.all(ROLES.map((roles) => startServiceProcess({ ...env, ROLES: roles })));
    instances.push(...started);
    urls = started.map((s) => s.url);
  }, 120_000);

  afterAll(async () => {
    for (const s of instances) if (s.child.exitCode === null) s.child.kill('SIGTERM');
    await Promise.all(instances.map((s) => s.exited));
    await receiver?.close();
    await database?.drop();
  });

  it('the per-address registration limit holds across instances: exactly N succeed', async () => {
    const answers = await Promise.all(
      Array.from({ length: 15 }, (_, i) =>
        call(urls[i % 3]!, 'POST', '/api/v1/bots/register', {
          headers: { 'x-forwarded-for': '198.51.100.77' },
          body: {
            bot_name: `limited-${i}`,
            owner_email: 'limited@example.com',
            callback_url: receiver.url('/limited'),
          },
        }),
      ),
    );
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses.filter((s) => s === 201)).toHaveLength(REGISTRATION_LIMIT);
    expect(statuses.filter((s) => s === 429)).toHaveLength(15 - REGISTRATION_LIMIT);
    const [row] = await database.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM bots WHERE registered_ip = '198.51.100.77'`,
    );
    expect(row!.n).toBe(REGISTRATION_LIMIT);
    // Another address is not affected.
    const other = await call(urls[1]!, 'POST', '/api/v1/bots/register', {
      headers: { 'x-forwarded-for': '198.51.100.78' },
      body: { bot_name: 'other', owner_email: 'limited@example.com', callback_url: receiver.url('/limited') },
    });
    expect(other.status).toBe(201);
  });

  it('under concurrent load: no overspend, holds decided once, expiry once, each delivery attempt sent once', {
    timeout: 150_000,
  }, async () => {
    const owner = await ownerToken(database.db, `scale-${Date.now()}@example.com`);
    await putGuardrails(urls[0]!, owner.token);
    const hook = receiver.url('/scale');

    // Wallet-limited, budget-limited and holding bots, set up in parallel through all instances.
    const noApproval = {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 100_000,
      per_transaction_cents: 100_000,
      daily_cents: 10_000_000,
      monthly_cents: 10_000_000,
    };
    const [walletBots, budgetBots, holdBots] = await Promise.all([
      Promise.all(
        [0, 1].map(() => setupBot(urls, owner, { ip: nextIp(), callbackUrl: hook, card: noApproval })),
      ),
      Promise.all(
        [0, 1].map(() =>
          setupBot(urls, owner, {
            ip: nextIp(),
            callbackUrl: hook,
            card: { ...noApproval, daily_cents: 700 },
          }),
        ),
      ),
      Promise.all(
        [0, 1].map(() =>
          setupBot(urls, owner, {
            ip: nextIp(),
            callbackUrl: hook,
            card: { ...noApproval, approval_threshold_cents: 150 },
          }),
        ),
      ),
    ]);

    // Fundings in parallel through every instance: 5 × 200 cents for the wallet-limited bots.
    const fund = (bot: ScaleBot, cents: number, i: number) =>
      call(urls[i % 3]!, 'POST', `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`, {
        auth: owner.token,
        body: { amount_cents: cents },
      });
    const fundings = await Promise.all([
      ...walletBots.flatMap((b) => Array.from({ length: 5 }, (_, i) => fund(b, 200, i))),
      ...budgetBots.map((b, i) => fund(b, 10_000, i)),
      ...holdBots.map((b, i) => fund(b, 100_000, i + 1)),
    ]);
    for (const f of fundings) expect(f.status, JSON.stringify(f.body)).toBe(200);
    for (const b of walletBots) {
      const [w] = await database.db.query<{ available_micros: number }>(
        'SELECT available_micros FROM wallets WHERE bot_id = $1',
        [b.bot_id],
      );
      expect(w!.available_micros).toBe(1000 * 10_000);
    }

    const checkoutVia = (i: number, bot: ScaleBot, cents: number) =>
      call(urls[i % 3]!, 'POST', '/api/v1/bot/merchant/checkout', {
        auth: bot.api_key,
        body: purchase(bot.real_profile_index, cents),
      });

    // Holds: created through instance i, decided through another one; some left to expire; for
    // some, approve and deny race on two different instances at the same moment.
    type HoldPlan = 'approve' | 'deny' | 'expire' | 'race';
    const plans: HoldPlan[] = [];
    for (let i = 0; i < 16; i++) plans.push((['approve', 'deny', 'expire', 'race'] as const)[i % 4]!);
    const holdResults: Array<{ id: string; plan: HoldPlan; decisions: Answer[] }> = [];
    const holdTask = Promise.all(
      plans.map(async (plan, i) => {
        const bot = holdBots[i % holdBots.length]!;
        const created = await checkoutVia(i, bot, 500 + i);
        expect(created.status, JSON.stringify(created.body)).toBe(202);
        const id = String(created.body.confirmation_id);
        const decide = (via: number, d: 'approve' | 'deny') =>
          call(urls[via % 3]!, 'POST', `/api/v1/owner/approvals/${id}/${d}`, { auth: owner.token });
        let decisions: Answer[] = [];
        if (plan === 'approve') decisions = [await decide(i + 1, 'approve')];
        if (plan === 'deny') decisions = [await decide(i + 2, 'deny')];
        if (plan === 'race') decisions = await Promise.all([decide(i + 1, 'approve'), decide(i + 2, 'deny')]);
        holdResults.push({ id, plan, decisions });
      }),
    );

    // Many parallel checkouts against the limited wallets and budgets, spread over instances.
    const limited = await Promise.all([
      ...walletBots.flatMap((b, k) =>
        Array.from({ length: 30 }, (_, i) => checkoutVia(i + k, b, 100).then((a) => ({ bot: b, a }))),
      ),
      ...budgetBots.flatMap((b, k) =>
        Array.from({ length: 30 }, (_, i) => checkoutVia(i + k, b, 100).then((a) => ({ bot: b, a }))),
      ),
    ]);
    await holdTask;
    for (const { a } of limited) expect([200, 402, 403], JSON.stringify(a.body)).toContain(a.status);
    const approvedOf = (bot: ScaleBot) => limited.filter((r) => r.bot === bot && r.a.status === 200);
    for (const b of walletBots) expect(approvedOf(b)).toHaveLength(10); // 1000 cents / 100
    for (const b of budgetBots) expect(approvedOf(b)).toHaveLength(7); // daily 700 / 100
    for (const b of walletBots) {
      const [w] = await database.db.query<{ available_micros: number; held_micros: number }>(
        'SELECT available_micros, held_micros FROM wallets WHERE bot_id = $1',
        [b.bot_id],
      );
      expect(w).toEqual({ available_micros: 0, held_micros: 0 });
    }
    for (const b of budgetBots) {
      const [c] = await database.db.query<{ s: number }>(
        `SELECT coalesce(sum(day_micros), 0)::bigint AS s FROM spend_windows WHERE scope = $1`,
        [`card:${b.card_id}`],
      );
      expect(Number(c!.s)).toBe(700 * 10_000);
    }

    // Each decision answered as the database says; a race has exactly one winner.
    for (const h of holdResults) {
      const ok = h.decisions.filter((d) => d.status === 200);
      for (const d of h.decisions) expect([200, 409], JSON.stringify(d.body)).toContain(d.status);
      if (h.plan === 'race') expect(ok.length).toBeLessThanOrEqual(1);
      if (h.plan === 'expire') expect(ok).toHaveLength(0);
    }
    const raceWinners = holdResults.filter(
      (h) => h.plan === 'race' && h.decisions.some((d) => d.status === 200),
    ).length;
    expect(raceWinners).toBeGreaterThan(0); // the window is 3 s: the owner is normally in time

    // Expiry: wait (bounded) until the job, run by the two worker instances, has expired every hold left.
    const expireIds = holdResults.filter((h) => h.plan === 'expire').map((h) => h.id);
    const deadline = Date.now() + (APPROVAL_WINDOW_SECONDS + 20) * 1000;
    for (;;) {
      const [p] = await database.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM checkout_confirmations WHERE status = 'pending'`,
      );
      if (p!.n === 0) break;
      if (Date.now() > deadline) throw new Error(`${p!.n} confirmations still pending after the window`);
      await sleep(250);
    }
    for (const h of holdResults) {
      const [row] = await database.db.query<{ status: string; decided_by: string | null }>(
        'SELECT status, decided_by FROM checkout_confirmations WHERE id = $1',
        [h.id],
      );
      const winner = h.decisions.find((d) => d.status === 200);
      if (winner) expect(row!.status).toBe(winner.body.status);
      else expect(row!.status).toBe('expired');
      if (h.plan === 'expire') expect(row).toEqual({ status: 'expired', decided_by: 'expiry' });
    }
    // Each expired once: one release and one purchase.expired event per expired confirmation.
    const expired = await database.db.query<{ id: string; releases: number; events: number }>(
      `SELECT c.id,
                (SELECT count(*)::int FROM ledger_transactions t WHERE t.reference = c.id AND t.kind = 'release') AS releases,
                (SELECT count(*)::int FROM events e WHERE e.type = 'purchase.expired' AND e.body::jsonb -> 'data' ->> 'checkout_id' = c.id) AS events
           FROM checkout_confirmations c WHERE c.status = 'expired'`,
    );
    expect(expired.map((e) => e.id)).toEqual(expect.arrayContaining(expireIds));
    for (const e of expired) expect(e).toEqual({ id: e.id, releases: 1, events: 1 });
    const [expiredEvents] = await database.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM events WHERE type = 'purchase.expired'`,
    );
    expect(expiredEvents!.n).toBe(expired.length);

    await expectLedgerBalanced(database.db);
    const statuses = await expectOneMovementPerConfirmation(database.db);
    await expectCountersMatchConfirmations(database.db);
    // Every approved confirmation the bots were told about is approved in the ledger, exactly once.
    for (const { a } of limited.filter((r) => r.a.status === 200))
      expect(statuses.get(String(a.body.confirmation_id))).toBe('approved');

    // Webhooks: every event delivered at least once, and no delivery attempt sent twice. The
    // receiver fails the first attempt of about a quarter of the deliveries (500), so retries are
    // claimed again by either worker instance; the number of times each delivery id arrives must
    // equal the attempts recorded for it (1, or 2 for a failed first attempt): an attempt sent by
    // two instances would arrive once more than recorded.
    const drained = await waitForDrain(database.db, () => receiver.requests, 45_000);
    expect(drained.missing).toEqual([]);
    expect(drained.pending).toBe(0);
    expect(drained.events.length).toBeGreaterThan(50);
    const perDelivery = new Map<string, number>();
    for (const r of receiver.requests) {
      const id = String(r.headers['x-service-delivery-id']);
      perDelivery.set(id, (perDelivery.get(id) ?? 0) + 1);
    }
    const recorded = await database.db.query<{ id: string; status: string; attempts: number }>(
      'SELECT id, status, attempts FROM webhook_deliveries',
    );
    expect(recorded).toHaveLength(drained.events.length);
    for (const d of recorded) {
      const expected = failFirst(d.id) ? 2 : 1;
      expect({ id: d.id, status: d.status, attempts: d.attempts, received: perDelivery.get(d.id) }).toEqual({
        id: d.id,
        status: 'delivered',
        attempts: expected,
        received: expected,
      });
    }
    expect(recorded.filter((d) => failFirst(d.id)).length).toBeGreaterThan(5);
    const retried = recorded.filter((d) => failFirst(d.id)).length;
    // The instances' own counters agree: the two worker instances made exactly the attempts the
    // receiver saw; the instance without the worker role made none.
    const attemptsOf = async (url: string, result: string) => {
      const text = await (await fetch(`${url}/metrics`)).text();
      const m = new RegExp(`delivery_attempts_total\\{[^}]*result="${result}"[^}]*\\}\\s+(\\d+)`).exec(text);
      return m ? Number(m[1]) : 0;
    };
    const delivered = (await attemptsOf(urls[0]!, 'delivered')) + (await attemptsOf(urls[2]!, 'delivered'));
    const failedAttempts =
      (await attemptsOf(urls[0]!, 'failed_attempt')) + (await attemptsOf(urls[2]!, 'failed_attempt'));
    expect({ delivered, failedAttempts }).toEqual({
      delivered: drained.events.length,
      failedAttempts: retried,
    });
    expect(await attemptsOf(urls[1]!, 'delivered')).toBe(0);
    expect(await attemptsOf(urls[1]!, 'failed_attempt')).toBe(0);
    expect(receiver.requests).toHaveLength(drained.events.length + retried);
  });

  // Each scheduled occurrence is created once across instances: test/tasks/schedules.test.ts
  // ('two instances on one database') races the engine ticks of instances with separate pools
  // under a fake clock; with these processes' real clock one occurrence would take minutes.
});
