import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkoutAttempt } from '../../src/checkout/attempt.ts';
import { processDueConfirmations } from '../../src/spend/holds.ts';
import { ownerMailSettled } from '../../src/notifications/job.ts';
import { newId } from '../../src/platform/ids.ts';
import { isPostgres } from '../support/db.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
  giveGenerousBudgets,
} from '../support/service.ts';
import {
  type Bot,
  checkout,
  counter,
  expectLedgerConsistent,
  purchase,
  putProfile,
  setupCard,
} from './helpers.ts';

// Real parallelism needs PostgreSQL (PGlite runs one transaction at a time).
describe.runIf(isPostgres)('checkout under concurrency (PostgreSQL)', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
  });
  afterAll(async () => {
    await svc.close();
  });

  const HIGH = {
    approval_mode: 'auto_approve_under_threshold',
    approval_threshold_cents: 1_000_000,
    per_transaction_cents: 100_000,
    daily_cents: 10_000_000,
    monthly_cents: 100_000_000,
  };

  async function generousOwner(): Promise<TestOwner> {
    const owner = await createOwner(svc);
    await giveGenerousBudgets(svc, owner);
    return owner;
  }

  async function fire(jobs: Array<{ bot: Bot; profile: number }>) {
    const results = await Promise.all(jobs.map((j) => checkout(svc, j.bot, purchase(j.profile, 100))));
    const codes = new Map<number, number>();
    for (const r of results) {
      expect(r.statusCode, r.body).toBeLessThan(500);
      codes.set(r.statusCode, (codes.get(r.statusCode) ?? 0) + 1);
    }
    return { results, codes };
  }

  it('150 parallel $1 checkouts against a $50 wallet approve exactly 50 and leave 0', async () => {
    const owner = await generousOwner();
    const bot = await activeBot(svc, owner, { fundCents: 5000 });
    const card = await setupCard(svc, owner, bot.bot_id, HIGH);
    await putProfile(svc, owner, bot.bot_id, card.card_id, card.real_profile_index, {
      allowance_cents: 1_000_000,
    });
    const { results, codes } = await fire(
      Array.from({ length: 150 }, () => ({ bot, profile: card.real_profile_index })),
    );
    expect(codes.get(200)).toBe(50);
    expect(codes.get(402)).toBe(100);
    expect(
      results.filter((r) => r.statusCode === 402).every((r) => r.json().error === 'insufficient_funds'),
    ).toBe(true);
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger).toMatchObject({ available_micros: 0, held_micros: 0, merchant_settlement: 5000 * 10_000 });
    expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(5000 * 10_000);
  });

  it('the same with holds: 150 parallel checkouts needing approval hold exactly $50', async () => {
    const owner = await generousOwner();
    const bot = await activeBot(svc, owner, { fundCents: 5000 });
    const card = await setupCard(svc, owner, bot.bot_id, { ...HIGH, approval_mode: 'ask_for_everything' });
    await putProfile(svc, owner, bot.bot_id, card.card_id, card.real_profile_index, {
      allowance_cents: 1_000_000,
    });
    const { codes } = await fire(
      Array.from({ length: 150 }, () => ({ bot, profile: card.real_profile_index })),
    );
    expect(codes.get(202)).toBe(50);
    expect(codes.get(402)).toBe(100);
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger).toMatchObject({ available_micros: 0, held_micros: 5000 * 10_000 });
  });

  it('150 parallel checkouts against a $30 daily card budget approve exactly 30', async () => {
    const owner = await generousOwner();
    const bot = await activeBot(svc, owner, { fundCents: 50_000 });
    const card = await setupCard(svc, owner, bot.bot_id, { ...HIGH, daily_cents: 3000 });
    await putProfile(svc, owner, bot.bot_id, card.card_id, card.real_profile_index, {
      allowance_cents: 1_000_000,
    });
    const { codes, results } = await fire(
      Array.from({ length: 150 }, () => ({ bot, profile: card.real_profile_index })),
    );
    expect(codes.get(200)).toBe(30);
    expect(codes.get(403)).toBe(120);
    expect(results.find((r) => r.statusCode === 403)!.json()).toMatchObject({
      error: 'card_guardrail_violation',
      limit: 'daily',
      remaining_usd: 0,
    });
    expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(3000 * 10_000);
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger.available_micros).toBe(47_000 * 10_000);
  });

  it('150 parallel checkouts against a $20 profile allowance approve exactly 20 (a decoy profile too)', async () => {
    const owner = await generousOwner();
    const bot = await activeBot(svc, owner, { fundCents: 50_000 });
    const card = await setupCard(svc, owner, bot.bot_id, HIGH);
    for (const p of [card.real_profile_index, card.decoyIndex]) {
      await putProfile(svc, owner, bot.bot_id, card.card_id, p, {
        allowance_cents: 2000,
        allowance_window: 'day',
      });
    }
    const jobs = Array.from({ length: 150 }, (_, i) => ({
      bot,
      profile: i % 2 === 0 ? card.real_profile_index : card.decoyIndex,
    }));
    const { results } = await fire(jobs);
    const approvedBy = (p: number) =>
      results.filter((r, i) => jobs[i]!.profile === p && r.statusCode === 200).length;
    expect(approvedBy(card.real_profile_index)).toBe(20);
    expect(approvedBy(card.decoyIndex)).toBe(20);
    expect(
      results.filter((r) => r.statusCode === 403).every((r) => r.json().error === 'allowance_exceeded'),
    ).toBe(true);
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger.available_micros).toBe(48_000 * 10_000);
  });

  it("150 parallel checkouts from two bots share the owner's $40 master daily budget: exactly 40", async () => {
    const owner = await createOwner(svc);
    await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: owner.auth,
      payload: {
        per_transaction_cents: 100_000,
        daily_budget_cents: 4000,
        monthly_budget_cents: 100_000_000,
      },
    });
    const a = await activeBot(svc, owner, { fundCents: 10_000 });
    const b = await activeBot(svc, owner, { fundCents: 10_000 });
    const cardA = await setupCard(svc, owner, a.bot_id, HIGH);
    const cardB = await setupCard(svc, owner, b.bot_id, HIGH);
    await putProfile(svc, owner, a.bot_id, cardA.card_id, cardA.real_profile_index, {
      allowance_cents: 1_000_000,
    });
    await putProfile(svc, owner, b.bot_id, cardB.card_id, cardB.real_profile_index, {
      allowance_cents: 1_000_000,
    });
    const jobs = Array.from({ length: 150 }, (_, i) =>
      i % 2 === 0
        ? { bot: a, profile: cardA.real_profile_index }
        : { bot: b, profile: cardB.real_profile_index },
    );
    const { codes, results } = await fire(jobs);
    expect(codes.get(200)).toBe(40);
    expect(
      results.filter((r) => r.statusCode === 403).every((r) => r.json().error === 'master_budget_exceeded'),
    ).toBe(true);
    expect(await counter(svc, `owner:${owner.id}`, 'day')).toBe(4000 * 10_000);
    const la = await expectLedgerConsistent(svc, a.bot_id);
    const lb = await expectLedgerConsistent(svc, b.bot_id);
    expect(la.merchant_settlement + lb.merchant_settlement).toBe(4000 * 10_000);
  });

  it('parallel approve and deny of the same confirmations decide each exactly once', async () => {
    const owner = await generousOwner();
    const bot = await activeBot(svc, owner, { fundCents: 5000 });
    const card = await setupCard(svc, owner, bot.bot_id, { ...HIGH, approval_mode: 'ask_for_everything' });
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await checkout(svc, bot, purchase(card.real_profile_index, 100));
      expect(r.statusCode).toBe(202);
      ids.push(r.json().confirmation_id);
    }
    const decide = (id: string, d: string) =>
      svc.app.inject({ method: 'POST', url: `/api/v1/owner/approvals/${id}/${d}`, headers: owner.auth });
    const results = await Promise.all(
      ids.flatMap((id) => [decide(id, 'approve'), decide(id, 'deny'), decide(id, 'approve')]),
    );
    for (let i = 0; i < ids.length; i++) {
      const trio = results.slice(i * 3, i * 3 + 3).map((r) => r.statusCode);
      expect(trio.filter((s) => s === 200)).toHaveLength(1);
      expect(trio.filter((s) => s === 409)).toHaveLength(2);
    }
    const approved = results.filter((r) => r.statusCode === 200 && r.json().status === 'approved').length;
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger).toMatchObject({
      held_micros: 0,
      merchant_settlement: approved * 100 * 10_000,
      available_micros: (5000 - approved * 100) * 10_000,
    });
    const ev = await svc.ctx.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM events WHERE bot_id = $1 AND type IN ('purchase.approved', 'purchase.denied')`,
      [bot.bot_id],
    );
    expect(ev[0]!.n).toBe(20);
  });

  it('parallel checkouts with one Idempotency-Key move money once', async () => {
    const owner = await generousOwner();
    const bot = await activeBot(svc, owner, { fundCents: 5000 });
    const card = await setupCard(svc, owner, bot.bot_id, HIGH);
    const results = await Promise.all(
      Array.from({ length: 20 }, () =>
        checkout(svc, bot, purchase(card.real_profile_index, 100), { 'idempotency-key': 'same' }),
      ),
    );
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    expect(new Set(results.map((r) => r.json().confirmation_id)).size).toBe(1);
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger.available_micros).toBe(4900 * 10_000);
  });
  it('expiry jobs running at once (as on several instances) expire each confirmation once', async () => {
    const owner = await generousOwner();
    const bot = await activeBot(svc, owner, { fundCents: 10_000 });
    const card = await setupCard(svc, owner, bot.bot_id, { ...HIGH, approval_mode: 'ask_for_everything' });
    for (let i = 0; i < 40; i++) {
      const profile = i % 4 === 0 ? card.decoyIndex : card.real_profile_index;
      expect((await checkout(svc, bot, purchase(profile, 100))).statusCode).toBe(202);
    }
    await ownerMailSettled(svc.ctx); // a row being marked mailed is passed over (SKIP LOCKED)
    svc.clock.advance(900_000);
    const counts = await Promise.all([1, 2, 3, 4].map(() => processDueConfirmations(svc.ctx)));
    // Other tests of this file left due confirmations too: at least ours were settled.
    expect(counts.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(40);
    const pending = await svc.ctx.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM checkout_confirmations WHERE status = 'pending'`,
    );
    expect(pending[0]!.n).toBe(0);
    const ev = await svc.ctx.db.query<{ body: string }>(
      `SELECT body FROM events WHERE bot_id = $1 AND type LIKE 'purchase.%'`,
      [bot.bot_id],
    );
    const ids = ev.map((e) => JSON.parse(e.body).data.checkout_id as string);
    expect(ids).toHaveLength(40);
    expect(new Set(ids).size).toBe(40);
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger).toMatchObject({
      held_micros: 0,
      available_micros: 10_000 * 10_000 - ledger.merchant_settlement,
    });
    expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(0);
  });
  it.each([
    ['a $30 card daily budget', { daily_cents: 3000 }, 5000, 30, 'window_limit:card_daily'],
    ['a $50 wallet', {}, 5000, 50, 'insufficient_funds:'],
  ] as const)(
    'the chain alone (without the per-bot rate-limit lock) never passes %s: 150 parallel transactions',
    async (_name, cardPatch, fund, approved, refusal) => {
      // The bot's rate-limit row lock (taken first in checkout_attempt) serialises one bot's
      // checkouts; here every call has a rate-limit key of its own, so that the conditional counter
      // upserts and the wallet CHECK carry it alone.
      const owner = await generousOwner();
      const bot = await activeBot(svc, owner, { fundCents: fund });
      const card = await setupCard(svc, owner, bot.bot_id, { ...HIGH, ...cardPatch });
      await putProfile(svc, owner, bot.bot_id, card.card_id, card.real_profile_index, {
        allowance_cents: 1_000_000,
      });
      const now = svc.clock.now();
      let n = 0;
      const attempt = () =>
        svc.ctx.db
          .transaction(async (tx) => {
            const r = await checkoutAttempt(tx, {
              botId: bot.bot_id,
              cardId: null,
              profileIndex: card.real_profile_index,
              amountMicros: 100 * 10_000,
              category: null,
              confirmationId: newId('chk'),
              merchantName: 'm',
              merchantUrl: 'u',
              itemName: 'i',
              taskId: null,
              now,
              approvalWindowSeconds: 900,
              ledgerTransactionId: newId('ltx'),
              eventId: newId('evt'),
              eventBody: '{}',
              rateKey: `checkout:${bot.bot_id}:${n++}`,
              rateLimit: 30,
              idempotencyKey: null,
              requestHash: null,
            });
            if (r.ok === true) return 'ok';
            // Refused: roll back, as the service does.
            throw new Error(
              r.ok === false ? `${r.refusal.error}:${'name' in r.refusal ? r.refusal.name : ''}` : 'replay',
            );
          })
          .catch((e: Error) => e.message);
      const results = await Promise.all(Array.from({ length: 150 }, attempt));
      expect(results.filter((r) => r === 'ok')).toHaveLength(approved);
      expect(results.filter((r) => r === refusal)).toHaveLength(150 - approved);
      expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(approved * 100 * 10_000);
      const ledger = await expectLedgerConsistent(svc, bot.bot_id);
      expect(ledger.available_micros).toBe((fund - approved * 100) * 10_000);
    },
  );
});
