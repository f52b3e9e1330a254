import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { createTestService, type TestService } from '../support/service.ts';
import { combine, judge, median, per, seeded, type Trial } from './classify.ts';
import { botEvents, simBots } from './world.ts';

// Channels: balance and spend counters, master-guardrail refusals, funds refusals, events and
// latency. 800 bots (timing is noisy: at 450 a CI run under load measured 0.224 for "slowest median
// checkout" while quiet runs of the same code gave 0.15–0.18; at 800 the limit, chance + 0.05, is
// about 3.8 standard errors above chance instead of 2.8, with 16 classifiers judged), each probed by an attacker who checks out twice on every profile in a random
// order (amounts drawn so that master budgets and the balance run out part-way) and reads the
// wallet after each checkout. Owners' master budgets are small, so refusals happen.

const BOTS = Number(process.env.SPLIT_KNOWLEDGE_BOTS ?? 800);
const rand = seeded(7);

interface Step {
  profile: number;
  amount: number;
  status: number;
  error: string | null;
  keys: string;
  ms: number;
  balanceDelta: number;
  spentDelta: number;
  remainingDelta: number;
  events: string[];
}

interface Observed {
  steps: Step[];
}

let svc: TestService;
const trials: Trial<Observed>[] = [];

beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
  const bots = await simBots(svc, BOTS, {
    fundCents: () => 2500 + Math.floor(rand() * 3000),
    card: {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 100_000,
      per_transaction_cents: 2000,
      daily_cents: 5000,
    },
    master: { per_transaction_cents: 900, daily_budget_cents: 1500, monthly_budget_cents: 10_000 },
  });
  for (const b of bots) {
    const wallet = async () =>
      (await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: b.bot.auth })).json() as {
        balance_usd: number;
        spending_limits: { monthly_spent_usd: number; monthly_remaining_usd: number };
      };
    let before = await wallet();
    const order = [1, 2, 3, 4, 5, 6].sort(() => rand() - 0.5);
    const steps: Step[] = [];
    for (const profile of [...order, ...order]) {
      svc.clock.advance(1000);
      const amount = 300 + Math.floor(rand() * 700);
      const t0 = performance.now();
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/merchant/checkout',
        headers: b.bot.auth,
        payload: {
          profile_index: profile,
          merchant_name: 'Acme Books',
          merchant_url: 'https://acme.example/books/1',
          item_name: 'A book',
          amount_cents: amount,
        },
      });
      const ms = performance.now() - t0;
      const after = await wallet();
      const body = res.json();
      steps.push({
        profile,
        amount,
        status: res.statusCode,
        error: body.error ?? null,
        keys: Object.keys(body).sort().join(','),
        ms,
        balanceDelta: Math.round((before.balance_usd - after.balance_usd) * 100),
        spentDelta: Math.round(
          (after.spending_limits.monthly_spent_usd - before.spending_limits.monthly_spent_usd) * 100,
        ),
        remainingDelta: Math.round(
          (before.spending_limits.monthly_remaining_usd - after.spending_limits.monthly_remaining_usd) * 100,
        ),
        events: [],
      });
      before = after;
    }
    // Events by the second they were written (the fake clock moved one second per checkout).
    const start = svc.clock.now() - steps.length * 1000;
    for (const e of await botEvents(svc, b.bot.bot_id)) {
      const k = Math.round((e.at - start) / 1000) - 1;
      if (k >= 0 && k < steps.length) steps[k]!.events.push(e.type);
    }
    trials.push({ real: b.card.real_profile_index, observed: { steps } });
  }
}, 600_000);

afterAll(async () => {
  await svc?.close();
});

const of = (o: Observed, i: number) => o.steps.filter((s) => s.profile === i);
const approved = (o: Observed, i: number) => of(o, i).filter((s) => s.status === 200);
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

describe('split knowledge: figures, refusals, events and latency under probing', () => {
  it('balance, counters, master refusals, funds refusals, events and latency do not single out the real profile', () => {
    const classifiers = {
      'balance moved unlike the amount': (o: Observed) =>
        per((i) => sum(approved(o, i).map((s) => Math.abs(s.balanceDelta - s.amount)))),
      'balance did not move': (o: Observed) =>
        per((i) => approved(o, i).filter((s) => s.balanceDelta === 0).length),
      'monthly_spent moved unlike the amount': (o: Observed) =>
        per((i) => sum(approved(o, i).map((s) => Math.abs(s.spentDelta - s.amount)))),
      'monthly_remaining moved unlike the amount': (o: Observed) =>
        per((i) => sum(approved(o, i).map((s) => Math.abs(s.remainingDelta - s.amount)))),
      'refused by master guardrails': (o: Observed) =>
        per((i) => of(o, i).filter((s) => s.error === 'master_budget_exceeded').length),
      'never refused by master guardrails': (o: Observed) =>
        per((i) => -of(o, i).filter((s) => s.error === 'master_budget_exceeded').length),
      'first master refusal': (o: Observed) => {
        const first = o.steps.find((s) => s.error === 'master_budget_exceeded');
        return per((i) => (first?.profile === i ? 1 : 0));
      },
      'refused for funds': (o: Observed) => per((i) => of(o, i).filter((s) => s.status === 402).length),
      'approved most often': (o: Observed) => per((i) => approved(o, i).length),
      'response fields differ': (o: Observed) =>
        per((i) => new Set(of(o, i).map((s) => `${s.status}:${s.keys}`)).size),
      'wallet.balance_low after it': (o: Observed) =>
        per((i) => of(o, i).filter((s) => s.events.includes('wallet.balance_low')).length),
      'events differ': (o: Observed) =>
        per((i) => sum(of(o, i).map((s) => s.events.length - (s.status === 200 ? 1 : 0)))),
      'slowest median checkout': (o: Observed) => per((i) => median(of(o, i).map((s) => s.ms))),
      'fastest median checkout': (o: Observed) => per((i) => -median(of(o, i).map((s) => s.ms))),
      'slowest approved checkout': (o: Observed) =>
        per((i) => Math.max(0, ...approved(o, i).map((s) => s.ms))),
    };
    judge('probing', trials, { ...classifiers, 'all combined': combine(Object.values(classifiers)) });
    const ms = (real: boolean) =>
      median(
        trials.flatMap((t) =>
          t.observed.steps.filter((s) => (s.profile === t.real) === real).map((s) => s.ms),
        ),
      );
    console.log(
      `[split-knowledge] median checkout: real ${ms(true).toFixed(2)} ms, decoy ${ms(false).toFixed(2)} ms`,
    );
  });
});
