import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processDueConfirmations } from '../../src/spend/holds.ts';
import { ledgerBalances } from '../../src/wallet/ledger.ts';
import { checkout, expectLedgerConsistent, purchase, putProfile, setupCard } from '../checkout/helpers.ts';
import { isPostgres } from '../support/db.ts';
import { activeBot, createTestService, type TestOwner, type TestService } from '../support/service.ts';
import { ownerWithDailyBudget } from './helpers.ts';
import {
  creditDeposit,
  enableWallet,
  payRequest,
  requirement,
  walletRow,
  X402_ENV,
} from '../x402/helpers.ts';

// The money invariants with both rails at once (PostgreSQL: PGlite runs one transaction at a time):
// card checkouts and x402 payments of one owner's bots in parallel against one master budget never
// pass it; the ledger equals the projections; a held purchase of either rail is decided once, by
// whichever of approve, deny and expiry comes first.

const GENEROUS_RAIL = {
  per_transaction_cents: 100_000,
  daily_cents: 1_000_000,
  monthly_cents: 10_000_000,
};

describe.runIf(isPostgres)('both rails under concurrency (PostgreSQL)', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService({ env: { ...X402_ENV, CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
  });
  afterAll(async () => svc?.close());

  const ownerWith = (dailyCents: number): Promise<TestOwner> => ownerWithDailyBudget(svc, dailyCents);

  type Payer = {
    botId: string;
    rail: 'card' | 'x402';
    pay: (cents: number, i: number) => ReturnType<typeof checkout>;
  };

  async function cardBot(owner: TestOwner, settings: Record<string, unknown>): Promise<Payer> {
    const bot = await activeBot(svc, owner, { fundCents: 100_000 });
    const card = await setupCard(svc, owner, bot.bot_id, { ...GENEROUS_RAIL, ...settings });
    await putProfile(svc, owner, bot.bot_id, card.card_id, card.real_profile_index, {
      allowance_cents: 1_000_000_000,
      allowance_window: 'month',
    });
    return {
      botId: bot.bot_id,
      rail: 'card',
      pay: (cents) => checkout(svc, bot, purchase(card.real_profile_index, cents)),
    };
  }

  async function x402Bot(owner: TestOwner, settings: Record<string, unknown>): Promise<Payer> {
    const bot = await activeBot(svc, owner);
    await enableWallet(svc, owner, bot.bot_id, { ...GENEROUS_RAIL, ...settings });
    await creditDeposit(svc, bot.bot_id, 100_000);
    return {
      botId: bot.bot_id,
      rail: 'x402',
      pay: (cents, i) =>
        payRequest(svc, bot, {
          resource_url: `https://api.example.com/item/${i}`,
          payment_requirements: [requirement({ amount: String(cents * 10_000) })],
        }),
    };
  }

  async function monthCounter(scope: string): Promise<number> {
    const rows = await svc.ctx.db.query<{ n: string }>(
      'SELECT coalesce(sum(month_micros), 0)::bigint AS n FROM spend_windows WHERE scope = $1',
      [scope],
    );
    return Number(rows[0]?.n ?? 0);
  }

  /** Ledger sums equal the projections of the bot's wallet on its rail; answers what the bot spent. */
  async function expectConsistent(p: Payer): Promise<number> {
    if (p.rail === 'card') {
      const l = await expectLedgerConsistent(svc, p.botId);
      return l.merchant_settlement + l.wallet_held;
    }
    const l = await ledgerBalances(svc.ctx.db, p.botId);
    const w = await walletRow(svc, p.botId);
    expect([l.x402_available, l.x402_held, l.x402_authorized]).toEqual([
      Number(w.available_micros),
      Number(w.held_micros),
      Number(w.authorized_micros),
    ]);
    expect(l.x402_deposits + l.x402_available + l.x402_held + l.x402_authorized + l.x402_paid).toBe(0);
    return l.x402_authorized + l.x402_held + l.x402_paid;
  }

  it('160 parallel $1 card checkouts and x402 payments against one $50 master day: exactly 50 pass', async () => {
    const owner = await ownerWith(5000);
    const auto = { approval_mode: 'auto_approve_under_threshold', approval_threshold_cents: 1_000_000 };
    const payers = [
      await cardBot(owner, auto),
      await x402Bot(owner, auto),
      await cardBot(owner, auto),
      await x402Bot(owner, auto),
    ];
    const results = await Promise.all(
      Array.from({ length: 160 }, (_, i) => payers[i % payers.length]!.pay(100, i)),
    );
    const codes = new Map<string, number>();
    for (const r of results) {
      expect(r.statusCode, r.body).toBeLessThan(500);
      const key = r.statusCode === 200 ? 'approved' : `${r.statusCode} ${r.json().error} ${r.json().limit}`;
      codes.set(key, (codes.get(key) ?? 0) + 1);
    }
    expect(Object.fromEntries(codes)).toEqual({ approved: 50, '403 master_budget_exceeded daily': 110 });
    // Nothing counted twice or lost: each bot's ledger, its counter and the owner's budget agree.
    let spent = 0;
    for (const p of payers) {
      const own = await expectConsistent(p);
      expect(await monthCounter(`bot:${p.botId}`)).toBe(own);
      spent += own;
    }
    expect(spent).toBe(5000 * 10_000);
    expect(await monthCounter(`owner:${owner.id}`)).toBe(5000 * 10_000);
  });

  it('a held purchase of either rail is decided once: approve, deny and expiry race', async () => {
    const owner = await ownerWith(1_000_000);
    const ask = { approval_mode: 'ask_for_everything' };
    const payers = [await cardBot(owner, ask), await x402Bot(owner, ask)];
    const held: Array<{ id: string; payer: Payer }> = [];
    for (let i = 0; i < 24; i++) {
      const p = payers[i % 2]!;
      const res = await p.pay(100 + i, i);
      expect(res.statusCode, res.body).toBe(202);
      held.push({ id: res.json().confirmation_id as string, payer: p });
    }
    const decide = (id: string, decision: 'approve' | 'deny') =>
      svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/approvals/${id}/${decision}`,
        headers: owner.auth,
      });
    // The first half: two approvals and a denial for each, all at once, beside the expiry job.
    const first = held.slice(0, 12);
    const answers = await Promise.all([
      ...first.flatMap((h) => [decide(h.id, 'approve'), decide(h.id, 'deny'), decide(h.id, 'approve')]),
      processDueConfirmations(svc.ctx),
    ]);
    const perHold = new Map<string, number[]>();
    first.forEach((h, k) => {
      perHold.set(
        h.id,
        answers.slice(k * 3, k * 3 + 3).map((a) => (a as { statusCode: number }).statusCode),
      );
    });
    for (const [id, statuses] of perHold) {
      expect(
        statuses.filter((s) => s === 200),
        id,
      ).toHaveLength(1);
      expect(
        statuses.filter((s) => s === 409),
        id,
      ).toHaveLength(2);
    }
    // The second half: the window elapses; three expiry runs and an approval each race.
    svc.clock.advance(svc.ctx.config.approvalWindowSeconds * 1000 + 1000);
    const rest = held.slice(12);
    const late = await Promise.all([
      ...rest.map((h) => decide(h.id, 'approve')),
      processDueConfirmations(svc.ctx),
      processDueConfirmations(svc.ctx),
      processDueConfirmations(svc.ctx),
    ]);
    for (const a of late.slice(0, rest.length)) expect((a as { statusCode: number }).statusCode).toBe(409);

    const rows = await svc.ctx.db.query<{ id: string; status: string }>(
      'SELECT id, status FROM checkout_confirmations WHERE id = ANY($1)',
      [held.map((h) => h.id)],
    );
    const status = new Map(rows.map((r) => [r.id, r.status]));
    for (const h of rest) expect(status.get(h.id)).toBe('expired');
    // One decision event per hold, naming its outcome.
    const events = await svc.ctx.db.query<{ type: string; body: string }>(
      `SELECT type, body FROM events WHERE bot_id = ANY($1) AND type IN ('purchase.approved', 'purchase.denied', 'purchase.expired')`,
      [payers.map((p) => p.botId)],
    );
    const decided = new Map<string, string[]>();
    for (const e of events) {
      const id = (JSON.parse(e.body) as { data: { checkout_id: string } }).data.checkout_id;
      decided.set(id, [...(decided.get(id) ?? []), e.type]);
    }
    for (const h of held) expect(decided.get(h.id), h.id).toEqual([`purchase.${status.get(h.id)}`]);
    // Money: what was approved is spent, everything else is back; counters hold the approved only.
    let approved = 0;
    held.forEach((h, i) => {
      if (status.get(h.id) === 'approved') approved += 100 + i;
    });
    let spent = 0;
    for (const p of payers) {
      const own = await expectConsistent(p);
      expect(await monthCounter(`bot:${p.botId}`)).toBe(own);
      spent += own;
    }
    expect(spent).toBe(approved * 10_000);
    expect(await monthCounter(`owner:${owner.id}`)).toBe(approved * 10_000);
  });
});
