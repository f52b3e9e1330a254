import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from '../support/service.ts';
import {
  CHANCE,
  chanceOfFalseFailure,
  combine,
  judge,
  judgeNoisy,
  median,
  per,
  seeded,
  type Trial,
} from './classify.ts';
import { botEvents, simBots } from './world.ts';

// Channels: balance and spend counters, master-guardrail refusals, funds refusals, events and
// latency. Each trial is an attacker who checks out twice on every profile in a random order
// (amounts drawn so that master budgets and the balance run out part-way) and reads the wallet
// after each checkout; owners' master budgets are small, so refusals happen.
//
// Counterfactual copies (docs/security.md, "How it is measured"): every trial is played six times,
// the card's real profile being 1, 2, …, 6 in turn, with the same attacker (the same seeded order
// and amounts, the same funding, at the same time of day). What the bot sees may depend on the real
// profile only through a leak, so the figures, refusals and events of the six copies are the same
// and every classifier of them scores exactly 1/6, on every run. Latency cannot be the same: the
// timing classifiers are judged over all 804 copies, and over 804 more only if one is above the
// limit over the first (judgeNoisy), which keeps the chance that any of them fails on an unchanged
// service below 10⁻⁶ (chanceOfFalseFailure; each copy's real profile is fixed and the six copies'
// hits add up to one trial's worth, so the binomial bound is conservative).

const TRIALS = Number(process.env.SPLIT_KNOWLEDGE_PROBING_TRIALS ?? 134);
const DAY = 86_400_000;
/** The copies' common start: 10:00 UTC, far from any midnight. */
const T0 = Date.parse('2026-01-05T10:00:00Z');

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
  trials.push(...(await play(0, TRIALS)));
}, 600_000);

/** The second stage of the timing classifiers (judgeNoisy): as many trials again, with new attackers. */
const more = () => play(TRIALS, TRIALS);

/** Plays trials first … first + count − 1, six copies each (their bots are new: one per copy). */
async function play(first: number, count: number): Promise<Trial<Observed>[]> {
  const out: Trial<Observed>[] = [];
  const trialOf = (i: number) => Math.floor(i / 6);
  const bots = await simBots(svc, count * 6, {
    first: first * 6,
    fundCents: (i) => 2500 + Math.floor(seeded(9000 + trialOf(i))() * 3000),
    realIndex: (i) => (i % 6) + 1,
    card: {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 100_000,
      per_transaction_cents: 2000,
      daily_cents: 5000,
    },
    master: { per_transaction_cents: 900, daily_budget_cents: 1500, monthly_budget_cents: 10_000 },
  });
  for (const [k, b] of bots.entries()) {
    const i = first * 6 + k;
    // The same attacker in every copy of the trial, from the same time of day.
    const rand = seeded(7000 + trialOf(i));
    svc.clock.set(T0 + i * DAY);
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
    // Events of one millisecond come in no particular order (their ids order them by time only).
    for (const step of steps) step.events.sort();
    out.push({ real: b.card.real_profile_index, observed: { steps } });
  }
  return out;
}

afterAll(async () => {
  await svc?.close();
});

const of = (o: Observed, i: number) => o.steps.filter((s) => s.profile === i);
const approved = (o: Observed, i: number) => of(o, i).filter((s) => s.status === 200);
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

describe('split knowledge: figures, refusals, events and latency under probing', () => {
  it('balance, counters, master refusals, funds refusals, events and latency do not single out the real profile', async () => {
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
    };
    const timing = {
      'slowest median checkout': (o: Observed) => per((i) => median(of(o, i).map((s) => s.ms))),
      'slowest approved checkout': (o: Observed) =>
        per((i) => Math.max(0, ...approved(o, i).map((s) => s.ms))),
    };
    const out = judge('probing', trials, classifiers);
    // The six copies of a trial saw the same figures, refusals and events: exactly 1/6.
    for (const name of Object.keys(classifiers)) expect(out[name], name).toBeCloseTo(CHANCE, 9);
    // Latency, alone or with the rest, is noisy: judged in two stages (judgeNoisy).
    await judgeNoisy(
      'probing: latency',
      trials,
      { ...timing, 'all combined': combine([...Object.values(classifiers), ...Object.values(timing)]) },
      more,
    );
    for (let t = 0; t < TRIALS; t++) {
      const six = trials
        .slice(t * 6, t * 6 + 6)
        .map((c) => JSON.stringify(c.observed.steps.map(({ ms: _ms, ...rest }) => rest)));
      expect(new Set(six).size, `trial ${t}`).toBe(1);
    }
    const k = Object.keys(timing).length + 1;
    const [stage, fail] = [
      k * chanceOfFalseFailure(trials.length),
      k * chanceOfFalseFailure(2 * trials.length),
    ];
    console.log(
      `[split-knowledge] probing: P(a timing classifier above the limit by chance) ≤ ${stage.toExponential(1)} for a second stage, ≤ ${fail.toExponential(1)} for a failure`,
    );
    if (TRIALS >= 134) expect(fail).toBeLessThan(1e-6);
    const ms = (real: boolean) =>
      median(
        trials.flatMap((t) =>
          t.observed.steps.filter((s) => (s.profile === t.real) === real).map((s) => s.ms),
        ),
      );
    console.log(
      `[split-knowledge] median checkout: real ${ms(true).toFixed(2)} ms, decoy ${ms(false).toFixed(2)} ms`,
    );
  }, 600_000);
});
