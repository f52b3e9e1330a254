import { afterAll, beforeAll, describe, it } from 'vitest';
import { processDueConfirmations } from '../../src/checkout/decisions.ts';
import { createTestService, type TestService } from '../support/service.ts';
import { combine, judge, median, per, seeded, type Trial } from './classify.ts';
import { type SimBot, simBots } from './world.ts';

// Channel: how held purchases are decided. 1,000 simulated owners, each with a way of deciding drawn
// from a population of owners (below), deciding the real profile's holds through the owner API on a fake
// clock; the service decides held decoys. In each of ROUNDS rounds the bot holds one purchase on
// every profile at once and watches when and how each is decided (its purchase.* events).
// The attacker sees every round; the service's history of the owner grows round by round.

const BOTS = Number(process.env.SPLIT_KNOWLEDGE_BOTS ?? 1000);
const ROUNDS = Number(process.env.SPLIT_KNOWLEDGE_ROUNDS ?? 2);
const STEP_MS = 10_000;
const WINDOW_MS = 900_000;
const rand = seeded(31);

type Outcome = 'approved' | 'denied' | 'expired';
interface Persona {
  decide: () => { outcome: Outcome; delayMs: number };
}
const gauss = () => Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
/**
 * Simulated owners: a population close to, but not the same as, the model the service draws decoy
 * personas from (src/cards/personas.ts): delays log-normal around 100 s with a wider spread, one in
 * five strict (denies 30–70 %), one in seven mostly absent (lets 50–95 % expire).
 */
function owner(): Persona {
  const median = Math.min(720_000, Math.max(5_000, 100_000 * Math.exp(1.2 * gauss())));
  const sigma = 0.25 + 0.6 * rand();
  const expire = rand() < 0.14 ? 0.5 + 0.45 * rand() : 0.1 * rand();
  const deny = (1 - expire) * (rand() < 0.2 ? 0.3 + 0.4 * rand() : 0.15 * rand());
  return {
    decide: () => {
      const roll = rand();
      if (roll < expire) return { outcome: 'expired', delayMs: WINDOW_MS };
      const delayMs = Math.min(
        WINDOW_MS - STEP_MS,
        Math.max(STEP_MS, Math.round(median * Math.exp(sigma * gauss()))),
      );
      return { outcome: roll < expire + deny ? 'denied' : 'approved', delayMs };
    },
  };
}

interface Decision {
  outcome: Outcome;
  delayMs: number;
}
interface Observed {
  /** rounds[r][i-1]: how profile i's hold of round r was decided. */
  rounds: Decision[][];
}

let svc: TestService;
const trials: Trial<Observed>[] = [];

beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
  const bots: Array<SimBot & { persona: Persona }> = (
    await simBots(svc, BOTS, {
      fundCents: () => 50_000,
      card: { per_transaction_cents: 1000, daily_cents: 100_000, monthly_cents: 1_000_000 },
      master: { per_transaction_cents: 1000, daily_budget_cents: 100_000, monthly_budget_cents: 1_000_000 },
    })
  ).map((b) => ({ ...b, persona: owner() }));
  // Allowances out of the way (this channel is about decisions; one statement instead of 6 PUTs a bot).
  await svc.ctx.db.query(`UPDATE card_profiles SET allowance_cents = 1000000, allowance_window = 'month'`);
  const observed = new Map<string, Decision[][]>(bots.map((b) => [b.bot.bot_id, []]));
  for (let round = 0; round < ROUNDS; round++) {
    svc.clock.advance(3600_000);
    const start = svc.clock.now();
    const pendingOwner: Array<{ at: number; owner: SimBot['owner']; id: string; outcome: Outcome }> = [];
    const ids = new Map<string, { bot: string; profile: number }>();
    for (const b of bots) {
      for (const profile of [1, 2, 3, 4, 5, 6]) {
        const res = await svc.app.inject({
          method: 'POST',
          url: '/api/v1/bot/merchant/checkout',
          headers: b.bot.auth,
          payload: {
            profile_index: profile,
            merchant_name: 'Acme Books',
            merchant_url: 'https://acme.example/books/1',
            item_name: 'A book',
            amount_cents: 100 + Math.floor(rand() * 400),
          },
        });
        if (res.statusCode !== 202) throw new Error(`expected a hold: ${res.statusCode} ${res.body}`);
        const id = res.json().confirmation_id as string;
        ids.set(id, { bot: b.bot.bot_id, profile });
        if (profile === b.card.real_profile_index) {
          const d = b.persona.decide();
          if (d.outcome !== 'expired')
            pendingOwner.push({ at: start + d.delayMs, owner: b.owner, id, outcome: d.outcome });
        }
      }
    }
    pendingOwner.sort((a, b) => a.at - b.at);
    for (let t = start + STEP_MS; t <= start + WINDOW_MS + STEP_MS; t += STEP_MS) {
      svc.clock.set(t);
      while (pendingOwner.length > 0 && pendingOwner[0]!.at <= t) {
        const p = pendingOwner.shift()!;
        const res = await svc.app.inject({
          method: 'POST',
          url: `/api/v1/owner/approvals/${p.id}/${p.outcome === 'approved' ? 'approve' : 'deny'}`,
          headers: p.owner.auth,
        });
        if (res.statusCode !== 200) throw new Error(`owner decision: ${res.statusCode} ${res.body}`);
      }
      await processDueConfirmations(svc.ctx, 100_000);
    }
    // The purchase.* events of the round, as each bot receives them.
    const rows = await svc.ctx.db.query<{ bot_id: string; type: string; body: string; created_at: Date }>(
      `SELECT bot_id, type, body, created_at FROM events WHERE created_at >= $1 AND type LIKE 'purchase.%'`,
      [new Date(start)],
    );
    const decided = new Map<string, Decision[]>(bots.map((b) => [b.bot.bot_id, []]));
    for (const r of rows) {
      const ref = ids.get(JSON.parse(r.body).data.checkout_id as string);
      if (!ref) continue;
      decided.get(r.bot_id)![ref.profile - 1] = {
        outcome: r.type.slice('purchase.'.length) as Outcome,
        delayMs: new Date(r.created_at).getTime() - start,
      };
    }
    for (const b of bots) observed.get(b.bot.bot_id)!.push(decided.get(b.bot.bot_id)!);
  }
  for (const b of bots)
    trials.push({ real: b.card.real_profile_index, observed: { rounds: observed.get(b.bot.bot_id)! } });
}, 900_000);

afterAll(async () => {
  await svc?.close();
});

const delays = (o: Observed, i: number) => o.rounds.map((r) => r[i - 1]!.delayMs);
const outcomes = (o: Observed, i: number) => o.rounds.map((r) => r[i - 1]!.outcome);
const logs = (o: Observed, i: number) => delays(o, i).map((d) => Math.log(d));
const variance = (xs: number[]) => {
  const m = xs.reduce((a, b) => a + b, 0) / xs.length;
  return xs.reduce((a, b) => a + (b - m) ** 2, 0) / xs.length;
};

describe('split knowledge: decisions of held purchases', () => {
  it('delays and outcomes of held decoys cannot be told from the owner', () => {
    // Classifiers over every round the bot watched.
    const classifiers = {
      'fastest decided (median)': (o: Observed) => per((i) => -median(delays(o, i))),
      'slowest decided (median)': (o: Observed) => per((i) => median(delays(o, i))),
      'steadiest delay (least variance)': (o: Observed) => per((i) => -variance(logs(o, i))),
      'most varied delay': (o: Observed) => per((i) => variance(logs(o, i))),
      'most typical delay (closest to all profiles’ median)': (o: Observed) => {
        const all = median([1, 2, 3, 4, 5, 6].flatMap((i) => logs(o, i)));
        return per((i) => -Math.abs(median(logs(o, i)) - all));
      },
      'most often approved': (o: Observed) =>
        per((i) => outcomes(o, i).filter((x) => x === 'approved').length),
      'most often denied': (o: Observed) => per((i) => outcomes(o, i).filter((x) => x === 'denied').length),
      'most often expired': (o: Observed) => per((i) => outcomes(o, i).filter((x) => x === 'expired').length),
      'decided within 20 s': (o: Observed) => per((i) => delays(o, i).filter((d) => d <= 20_000).length),
      'still pending after 10 minutes': (o: Observed) =>
        per((i) => delays(o, i).filter((d) => d > 600_000).length),
    };
    judge('decisions', trials, { ...classifiers, 'all combined': combine(Object.values(classifiers)) });
    // The first round alone, where the service knew nothing of the owner yet.
    const first = trials.map((t) => ({ real: t.real, observed: { rounds: t.observed.rounds.slice(0, 1) } }));
    judge('decisions, first round only', first, {
      'fastest decided': classifiers['fastest decided (median)'],
      'slowest decided': classifiers['slowest decided (median)'],
      'most typical delay': classifiers['most typical delay (closest to all profiles’ median)'],
    });
  });
});
