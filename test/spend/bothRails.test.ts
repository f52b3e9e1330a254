import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processDueConfirmations } from '../../src/spend/holds.ts';
import { checkout, purchase, putProfile, setupCard } from '../checkout/helpers.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';
import { creditDeposit, enableWallet, payRequest, requirement, X402_ENV } from '../x402/helpers.ts';

// One table of guardrail cases, run through both rails: a card checkout and an x402 payment, both
// through the one chain spend_run (src/migrations/functions/spend_run.sql) with their own payment
// method (src/checkout/attempt.ts, src/x402/service.ts). The same
// limits, funds and approval settings must give the same decisions with the same codes and the same
// figures in the refusal; the only difference allowed is the name of the rail's own limit code
// (card_guardrail_violation for a card, rail_guardrail_violation for the partner wallet, as the
// spec names them). Boundaries: exactly at a limit passes, one unit over refuses, approval is asked
// when the amount meets the threshold. A refusal leaves money, counters, holds and events as they
// were. The table's amounts are in cents (a card's unit at the API; the x402 amount is the same
// figure ×10,000 in micro-USDC); the counters hold micros (migration 0050). The last case shares one
// master budget between a card and x402 payments of sub-cent amounts, exact to the micro.

type Rail = 'card' | 'x402';

interface Limits {
  per_transaction?: number;
  daily?: number;
  monthly?: number;
}

interface Setup {
  rail?: Limits;
  master?: Limits;
  fund?: number;
  approval?: { mode: 'ask_for_everything' } | { mode: 'auto_approve_under_threshold'; threshold: number };
  frozen?: boolean;
  /** The card profile's allowance (a card has profiles; the partner wallet has none). */
  allowance?: { cents: number; window: 'day' | 'week' | 'month' };
}

type Outcome =
  | 'approved'
  | 'held'
  | {
      status: number;
      /** 'rail_limit' stands for the rail's own limit code. */
      error:
        | 'rail_limit'
        | 'master_budget_exceeded'
        | 'insufficient_funds'
        | 'wallet_frozen'
        | 'allowance_exceeded';
      limit?: string;
      limit_usd?: number;
      remaining_usd?: number;
      balance_usd?: number;
      window?: string;
    };

type Step =
  | { pay: number; expect: Outcome }
  | { deny: 'last_held' }
  | { approve: 'last_held' }
  | { expire: 'last_held' };

interface Case {
  name: string;
  setup: Setup;
  steps: Step[];
  /** Rails the case applies to (both unless said). */
  rails?: Rail[];
}

const railLimit = (limit: string, limitUsd: number, remainingUsd: number): Outcome => ({
  status: 403,
  error: 'rail_limit',
  limit,
  limit_usd: limitUsd,
  remaining_usd: remainingUsd,
});
const master = (limit: string, limitUsd: number, remainingUsd: number): Outcome => ({
  status: 403,
  error: 'master_budget_exceeded',
  limit,
  limit_usd: limitUsd,
  remaining_usd: remainingUsd,
});
const funds = (balanceUsd: number): Outcome => ({
  status: 402,
  error: 'insufficient_funds',
  balance_usd: balanceUsd,
});

const CASES: Case[] = [
  {
    name: 'per-transaction: at the limit passes, a cent over refuses',
    setup: { rail: { per_transaction: 500 } },
    steps: [
      { pay: 500, expect: 'approved' },
      { pay: 501, expect: railLimit('per_transaction', 5, 5) },
    ],
  },
  {
    name: 'daily: filled to exactly the limit, then one cent refuses',
    setup: { rail: { daily: 1000 } },
    steps: [
      { pay: 600, expect: 'approved' },
      { pay: 401, expect: railLimit('daily', 10, 4) },
      { pay: 400, expect: 'approved' },
      { pay: 1, expect: railLimit('daily', 10, 0) },
    ],
  },
  {
    name: 'monthly: filled to exactly the limit, then one cent refuses',
    setup: { rail: { monthly: 1000 } },
    steps: [
      { pay: 700, expect: 'approved' },
      { pay: 301, expect: railLimit('monthly', 10, 3) },
      { pay: 300, expect: 'approved' },
      { pay: 1, expect: railLimit('monthly', 10, 0) },
    ],
  },
  {
    name: 'a refused amount is not counted',
    setup: { rail: { daily: 1000 } },
    steps: [
      { pay: 1001, expect: railLimit('daily', 10, 10) },
      { pay: 1000, expect: 'approved' },
    ],
  },
  {
    name: 'master per-transaction',
    setup: { master: { per_transaction: 300 } },
    steps: [
      { pay: 300, expect: 'approved' },
      { pay: 301, expect: master('per_transaction', 3, 3) },
    ],
  },
  {
    name: 'master daily',
    setup: { master: { daily: 1000 } },
    steps: [
      { pay: 999, expect: 'approved' },
      { pay: 2, expect: master('daily', 10, 0.01) },
      { pay: 1, expect: 'approved' },
      { pay: 1, expect: master('daily', 10, 0) },
    ],
  },
  {
    name: 'master monthly',
    setup: { master: { monthly: 800 } },
    steps: [
      { pay: 500, expect: 'approved' },
      { pay: 301, expect: master('monthly', 8, 3) },
      { pay: 300, expect: 'approved' },
    ],
  },
  {
    name: "the rail's limit is judged before the master limit",
    setup: { rail: { per_transaction: 100 }, master: { per_transaction: 50 } },
    steps: [
      { pay: 101, expect: railLimit('per_transaction', 1, 1) },
      { pay: 51, expect: master('per_transaction', 0.5, 0.5) },
    ],
  },
  {
    // Nothing counted yet: no counter row to hold the condition, so the amount alone decides.
    name: 'a first purchase above the daily limit on its own refuses, with nothing spent',
    setup: { rail: { daily: 1000 } },
    steps: [
      { pay: 1001, expect: railLimit('daily', 10, 10) },
      { pay: 1000, expect: 'approved' },
    ],
  },
  {
    name: 'a first purchase above the master daily or monthly budget on its own refuses, with nothing spent',
    setup: { master: { daily: 1000, monthly: 1500 } },
    steps: [
      { pay: 1001, expect: master('daily', 10, 10) },
      { pay: 1000, expect: 'approved' },
      { pay: 501, expect: master('daily', 10, 0) },
    ],
  },
  {
    name: "the rail's daily limit is judged before the master daily budget",
    setup: { rail: { daily: 500 }, master: { daily: 400 } },
    steps: [
      { pay: 501, expect: railLimit('daily', 5, 5) },
      { pay: 401, expect: master('daily', 4, 4) },
      { pay: 400, expect: 'approved' },
      { pay: 1, expect: master('daily', 4, 0) },
    ],
  },
  {
    name: 'funds: exactly the balance passes, a cent more refuses',
    setup: { fund: 1000 },
    steps: [
      { pay: 1001, expect: funds(10) },
      { pay: 1000, expect: 'approved' },
      { pay: 1, expect: funds(0) },
    ],
  },
  {
    name: 'limits are judged before funds',
    setup: { fund: 100, rail: { per_transaction: 50 }, master: { daily: 70 } },
    steps: [
      { pay: 200, expect: railLimit('per_transaction', 0.5, 0.5) },
      { pay: 50, expect: 'approved' },
      { pay: 30, expect: master('daily', 0.7, 0.2) },
      { pay: 20, expect: 'approved' },
    ],
  },
  {
    name: 'approval threshold: under it approved, meeting it held',
    setup: { approval: { mode: 'auto_approve_under_threshold', threshold: 500 } },
    steps: [
      { pay: 499, expect: 'approved' },
      { pay: 500, expect: 'held' },
      { pay: 501, expect: 'held' },
    ],
  },
  {
    name: 'approval threshold zero: everything is held',
    setup: { approval: { mode: 'auto_approve_under_threshold', threshold: 0 } },
    steps: [{ pay: 1, expect: 'held' }],
  },
  {
    name: 'ask for everything; a hold counts in the limits and its denial gives them back',
    setup: { approval: { mode: 'ask_for_everything' }, rail: { daily: 1000 }, master: { monthly: 950 } },
    steps: [
      { pay: 600, expect: 'held' },
      { pay: 401, expect: railLimit('daily', 10, 4) },
      { deny: 'last_held' },
      { pay: 900, expect: 'held' },
      { pay: 51, expect: master('monthly', 9.5, 0.5) },
      { pay: 50, expect: 'held' },
    ],
  },
  {
    name: 'a hold takes the money from the balance; its denial gives it back',
    setup: { approval: { mode: 'ask_for_everything' }, fund: 1000 },
    steps: [
      { pay: 600, expect: 'held' },
      { pay: 401, expect: funds(4) },
      { deny: 'last_held' },
      { pay: 1000, expect: 'held' },
    ],
  },
  {
    name: 'an approved hold keeps its place in the limits; an expired one gives it back',
    setup: { approval: { mode: 'ask_for_everything' }, rail: { daily: 1000 }, fund: 1000 },
    steps: [
      { pay: 600, expect: 'held' },
      { approve: 'last_held' },
      { pay: 401, expect: railLimit('daily', 10, 4) },
      { pay: 400, expect: 'held' },
      { pay: 1, expect: railLimit('daily', 10, 0) },
      { expire: 'last_held' },
      { pay: 401, expect: railLimit('daily', 10, 4) },
      { pay: 400, expect: 'held' },
    ],
  },
  {
    name: 'a frozen wallet refuses before any limit',
    setup: { frozen: true, rail: { per_transaction: 1 } },
    steps: [{ pay: 5, expect: { status: 403, error: 'wallet_frozen' } }],
  },
  {
    // The partner wallet has no profiles, so no allowance: a card-only row, kept in the table so
    // that a core shared by both rails keeps its code and figures.
    name: "profile allowance (the card's profiles only)",
    rails: ['card'],
    setup: { allowance: { cents: 1000, window: 'day' } },
    steps: [
      { pay: 1000, expect: 'approved' },
      {
        pay: 1,
        expect: {
          status: 403,
          error: 'allowance_exceeded',
          limit: 'allowance',
          window: 'day',
          limit_usd: 10,
          remaining_usd: 0,
        },
      },
    ],
  },
];

const GENEROUS = { per_transaction: 100_000, daily: 1_000_000, monthly: 10_000_000 };
const URL_A = 'https://api.example.com/weather';

describe('the guardrail chain: the same cases through both rails', () => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await createTestService({ env: { ...X402_ENV, CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
  });
  afterAll(async () => svc?.close());

  async function ownerWith(limits: Limits = {}): Promise<TestOwner> {
    const owner = await createOwner(svc);
    const m = { ...GENEROUS, ...limits };
    const res = await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: owner.auth,
      payload: {
        per_transaction_cents: m.per_transaction,
        daily_budget_cents: m.daily,
        monthly_budget_cents: m.monthly,
      },
    });
    expect(res.statusCode, res.body).toBe(200);
    return owner;
  }

  /** A bot on one rail with the setup: a function that pays an amount in cents on it. */
  async function botOn(rail: Rail, owner: TestOwner, setup: Setup) {
    const limits = { ...GENEROUS, ...setup.rail };
    const approval = setup.approval ?? { mode: 'auto_approve_under_threshold', threshold: 1_000_000 };
    const fund = setup.fund ?? 100_000;
    const settings = {
      per_transaction_cents: limits.per_transaction,
      daily_cents: limits.daily,
      monthly_cents: limits.monthly,
      approval_mode: approval.mode,
      ...('threshold' in approval ? { approval_threshold_cents: approval.threshold } : {}),
    };
    let pay: (cents: number) => ReturnType<typeof checkout>;
    let bot: Awaited<ReturnType<typeof activeBot>>;
    let cardId: string | null = null;
    if (rail === 'card') {
      bot = await activeBot(svc, owner, { fundCents: fund });
      const card = await setupCard(svc, owner, bot.bot_id, settings);
      cardId = card.card_id;
      await putProfile(svc, owner, bot.bot_id, card.card_id, card.real_profile_index, {
        allowance_cents: setup.allowance?.cents ?? 1_000_000_000,
        allowance_window: setup.allowance?.window ?? 'month',
      });
      pay = (cents) => checkout(svc, bot, purchase(card.real_profile_index, cents));
    } else {
      bot = await activeBot(svc, owner);
      await enableWallet(svc, owner, bot.bot_id, settings);
      await creditDeposit(svc, bot.bot_id, fund);
      pay = (cents) =>
        payRequest(svc, bot, {
          resource_url: URL_A,
          payment_requirements: [requirement({ amount: String(cents * 10_000) })],
        });
    }
    if (setup.frozen) {
      const f = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
        headers: owner.auth,
      });
      expect(f.statusCode, f.body).toBe(200);
    }
    return { bot, pay, cardId };
  }

  /** Everything a refusal must leave as it was (the rate-limit row aside: a refusal counts there). */
  async function snapshot(botId: string, ownerId: string) {
    const q = async (sql: string, params: unknown[]) => JSON.stringify(await svc.ctx.db.query(sql, params));
    return [
      await q(
        `SELECT scope, day_start, day_micros, week_start, week_micros, month_start, month_micros FROM spend_windows
          WHERE scope LIKE '%' || $1 || '%' OR scope LIKE '%' || $2 || '%' OR scope LIKE 'card:%'
             OR scope LIKE 'profile:%' ORDER BY 1`,
        [botId, ownerId],
      ),
      await q('SELECT available_micros, held_micros FROM wallets WHERE bot_id = $1', [botId]),
      await q('SELECT available_micros, held_micros, authorized_micros FROM x402_wallets WHERE bot_id = $1', [
        botId,
      ]),
      await q('SELECT count(*)::int AS n FROM ledger_entries WHERE bot_id = $1', [botId]),
      await q('SELECT count(*)::int AS n FROM checkout_confirmations WHERE bot_id = $1', [botId]),
      await q('SELECT count(*)::int AS n FROM x402_payments WHERE bot_id = $1', [botId]),
      await q('SELECT count(*)::int AS n FROM events WHERE bot_id = $1', [botId]),
    ].join('\n');
  }

  function outcomeOf(rail: Rail, res: { statusCode: number; json: () => Record<string, unknown> }): Outcome {
    const body = res.json();
    if (res.statusCode === 200 && body.approved === true) return 'approved';
    if (res.statusCode === 202 && body.approved === false) return 'held';
    const own = rail === 'card' ? 'card_guardrail_violation' : 'rail_guardrail_violation';
    const error = body.error === own ? 'rail_limit' : body.error;
    const out: Record<string, unknown> = { status: res.statusCode, error };
    for (const k of ['limit', 'limit_usd', 'remaining_usd', 'balance_usd', 'window']) {
      if (k in body) out[k] = body[k];
    }
    return out as Outcome;
  }

  async function counted(scope: string): Promise<number> {
    const rows = await svc.ctx.db.query<{ n: string }>(
      'SELECT coalesce(sum(month_micros), 0)::bigint AS n FROM spend_windows WHERE scope = $1',
      [scope],
    );
    return Number(rows[0]?.n ?? 0);
  }

  for (const c of CASES) {
    for (const rail of c.rails ?? (['card', 'x402'] as const)) {
      it(`${rail}: ${c.name}`, async () => {
        const owner = await ownerWith(c.setup.master);
        const { bot, pay } = await botOn(rail, owner, c.setup);
        const seen: Outcome[] = [];
        const expected: Outcome[] = [];
        let lastHeld: string | null = null;
        let inCounters = 0;
        const holds = new Map<string, number>();
        for (const step of c.steps) {
          if ('deny' in step || 'approve' in step) {
            const id = lastHeld as string;
            const decision = 'deny' in step ? 'deny' : 'approve';
            const res = await svc.app.inject({
              method: 'POST',
              url: `/api/v1/owner/approvals/${id}/${decision}`,
              headers: owner.auth,
            });
            expect(res.statusCode, res.body).toBe(200);
            if (decision === 'deny') inCounters -= holds.get(id) ?? 0;
            continue;
          }
          if ('expire' in step) {
            const id = lastHeld as string;
            svc.clock.advance(svc.ctx.config.approvalWindowSeconds * 1000 + 1000);
            await processDueConfirmations(svc.ctx);
            const row = await svc.ctx.db.query<{ status: string }>(
              'SELECT status FROM checkout_confirmations WHERE id = $1',
              [id],
            );
            expect(row[0]?.status).toBe('expired');
            inCounters -= holds.get(id) ?? 0;
            continue;
          }
          const before = await snapshot(bot.bot_id, owner.id);
          const res = await pay(step.pay);
          const outcome = outcomeOf(rail, res);
          seen.push(outcome);
          expected.push(step.expect);
          if (outcome === 'held' || outcome === 'approved') {
            inCounters += step.pay;
            if (outcome === 'held') {
              lastHeld = res.json().confirmation_id as string;
              holds.set(lastHeld, step.pay);
            }
          } else {
            expect(await snapshot(bot.bot_id, owner.id), `${JSON.stringify(outcome)} changed something`).toBe(
              before,
            );
          }
        }
        // All steps compared at once: a divergence shows the whole sequence of decisions.
        expect(seen).toEqual(expected);
        // The owner's master budget and the bot's own figure hold what was approved or is held.
        expect(await counted(`owner:${owner.id}`)).toBe(inCounters * 10_000);
        expect(await counted(`bot:${bot.bot_id}`)).toBe(inCounters * 10_000);
      });
    }
  }

  it("the partner wallet to the micro (a card's amounts are whole cents): its own limits, funds and approval threshold", async () => {
    const owner = await ownerWith();
    const payOn = (b: Awaited<ReturnType<typeof botOn>>) => (micros: number) =>
      payRequest(svc, b.bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: String(micros) })],
      });
    // $5 per payment and $10 a day on the rail.
    const limits = payOn(await botOn('x402', owner, { rail: { per_transaction: 500, daily: 1000 } }));
    const seen: Outcome[] = [];
    for (const micros of [5_000_001, 5_000_000, 4_999_999, 2, 1, 1]) {
      seen.push(outcomeOf('x402', await limits(micros)));
    }
    expect(seen).toEqual([
      railLimit('per_transaction', 5, 5),
      'approved',
      'approved',
      railLimit('daily', 10, 0.000001),
      'approved',
      railLimit('daily', 10, 0),
    ]);
    // $10 in the wallet: one micro more refuses, exactly the balance passes, then nothing is left.
    const funded = payOn(await botOn('x402', owner, { fund: 1000 }));
    const paid: Outcome[] = [];
    for (const micros of [10_000_001, 10_000_000, 1]) paid.push(outcomeOf('x402', await funded(micros)));
    expect(paid).toEqual([funds(10), 'approved', funds(0)]);
    // Approval asked when the amount meets the $5 threshold, to the micro.
    const threshold = payOn(
      await botOn('x402', owner, { approval: { mode: 'auto_approve_under_threshold', threshold: 500 } }),
    );
    expect(outcomeOf('x402', await threshold(4_999_999))).toBe('approved');
    expect(outcomeOf('x402', await threshold(5_000_000))).toBe('held');
  });

  it("one master budget across both rails: each rail sees the other's spending", async () => {
    const owner = await ownerWith({ daily: 1000 });
    const card = await botOn('card', owner, {});
    const x402 = await botOn('x402', owner, {});
    const steps: Array<[typeof card, number, Outcome]> = [
      [card, 600, 'approved'],
      [x402, 401, master('daily', 10, 4)],
      [x402, 400, 'approved'],
      [card, 1, master('daily', 10, 0)],
      [x402, 1, master('daily', 10, 0)],
    ];
    const seen: Outcome[] = [];
    for (const [b, cents] of steps) {
      seen.push(outcomeOf(b === card ? 'card' : 'x402', await b.pay(cents)));
    }
    expect(seen).toEqual(steps.map((s) => s[2]));
    expect(await counted(`owner:${owner.id}`)).toBe(1000 * 10_000);
  });

  it('one master budget across both rails is exact to the micro: at the limit passes, one micro over refuses', async () => {
    // $1.00 a day for the owner; a card purchase of $0.99 and x402 payments in micro-USDC share it.
    const owner = await ownerWith({ daily: 100 });
    const card = await botOn('card', owner, {});
    const x402 = await botOn('x402', owner, {});
    const payMicros = (micros: number) =>
      payRequest(svc, x402.bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: String(micros) })],
      });
    const seen: Outcome[] = [];
    seen.push(outcomeOf('card', await card.pay(99)));
    seen.push(outcomeOf('x402', await payMicros(9_001)));
    seen.push(outcomeOf('x402', await payMicros(1_000)));
    // $0.99 + $0.009001 + $0.001 = $1.000001: one micro over.
    expect(seen).toEqual(['approved', 'approved', master('daily', 1, 0.000999)]);
    expect(await counted(`owner:${owner.id}`)).toBe(999_001);
    // Exactly what is left ($0.000999) passes; then one micro is over on either rail.
    expect(outcomeOf('x402', await payMicros(999))).toBe('approved');
    expect(await counted(`owner:${owner.id}`)).toBe(1_000_000);
    expect(outcomeOf('x402', await payMicros(1))).toEqual(master('daily', 1, 0));
    expect(outcomeOf('card', await card.pay(1))).toEqual(master('daily', 1, 0));
    expect(await counted(`owner:${owner.id}`)).toBe(1_000_000);
    // The figures the owner reads agree to the micro.
    const budget = await svc.app.inject({ url: '/api/v1/owner/guardrails', headers: owner.auth });
    expect(budget.json()).toMatchObject({ daily_budget_usd: 1, daily_spent_usd: 1 });
  });
});
