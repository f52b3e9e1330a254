import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SHOPS } from '../../src/merchants/catalog.ts';
import { runTasksOnce } from '../../src/tasks/engine.ts';
import { createSchedule } from '../../src/tasks/schedules.ts';
import { createTestService, type TestService } from '../support/service.ts';
import {
  chanceOfFalseFailure,
  combine,
  judge,
  judgeNoisy,
  median,
  per,
  seeded,
  type Trial,
} from './classify.ts';
import { simBots } from './world.ts';

// Channels: decoy task pacing, the never-tasked index, task timing and amounts, and merchant
// domains. 1,000 owners each schedule one recurring real purchase on the real profile (a random
// cron: daily, weekdays, weekly, twice a day or every six hours, at round or odd minutes), and the
// engine runs at every due time for two days. Before that, the same bots spend two days without
// schedules.
// The bot sees each task's fields and the time it became available (the task.available event).

// 1,000 owners: the shadows' offsets, shops and amounts are random draws, so most classifiers here
// score a binomial around 1/6 rather than tie. They are judged in two stages (judgeNoisy): 1,000
// more owners are played only if one is above the limit over the first 1,000, and the run fails
// only if one is above it over all 2,000. With 13 of them judged, the chance of a failure on an
// unchanged service stays below 10⁻⁶ (chanceOfFalseFailure, printed below); one stage left 3 in
// 10,000.
const BOTS = Number(process.env.SPLIT_KNOWLEDGE_BOTS ?? 1000);
const DAYS = 2;
const rand = seeded(2026);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

function randomCron(): string {
  const minute = pick([0, 0, 0, 0, 30, 30, 15, 45, 5, 10, 20, 40, 7, 23, 52]);
  const hour = 6 + Math.floor(rand() * 14);
  return pick([
    `${minute} ${hour} * * *`,
    `${minute} ${hour} * * 1-5`,
    `${minute} ${hour} * * ${Math.floor(rand() * 7)}`,
    `${minute} ${hour},${(hour + 8) % 24} * * *`,
    `${minute} */6 * * *`,
  ]);
}

interface Task {
  at: number;
  profile: number;
  url: string;
  item: string;
  amount: number;
  category: string;
}
interface Observed {
  tasks: Task[];
  /** The owner's cron (for the per-kind breakdown printed below; not used by any classifier). */
  cron?: string;
}

let svc: TestService;
const withSchedules: Trial<Observed>[] = [];
const withShopHosts: Trial<Observed>[] = [];
const without: Trial<Observed>[] = [];

async function simulate(
  s: TestService,
  bots: Awaited<ReturnType<typeof simBots>>,
  schedule: boolean,
): Promise<Trial<Observed>[]> {
  const crons = new Map<string, string>();
  if (schedule) {
    // The owners' draws in bot order (one seeded sequence), then the schedules themselves.
    const bodies = bots.map((b) => {
      const cron = randomCron();
      crons.set(b.bot.bot_id, cron);
      return {
        cron,
        timezone: 'UTC',
        instructions: {
          profile_index: b.card.real_profile_index,
          merchant_name: 'Corner Shop',
          merchant_url: `https://${pick(['corner-coffee', 'paper-co', 'city-pharmacy', 'bytes-and-bits'])}.example.com/item/${Math.floor(rand() * 1000)}`,
          item_name: 'Weekly supplies',
          amount_cents: 300 + Math.floor(rand() * 2700),
          category: pick(['groceries', 'books', 'electronics', 'household', 'office']),
        },
      };
    });
    // The first owner schedules through the owner API; the others through the function its route
    // hands the body to, unchanged (createSchedule): the same rows without a request each, and on
    // PostgreSQL a few owners at a time (independent owners: nothing waits for a lock).
    const res = await s.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bots[0]!.bot.bot_id}/schedules`,
      headers: bots[0]!.owner.auth,
      payload: bodies[0],
    });
    if (res.statusCode !== 201) throw new Error(`schedule: ${res.statusCode} ${res.body}`);
    const batch = s.ctx.db.kind === 'postgres' ? 8 : 1;
    for (let i = 1; i < bots.length; i += batch) {
      await Promise.all(
        bots
          .slice(i, i + batch)
          .map((b, k) => createSchedule(s.ctx, b.owner.id, b.bot.bot_id, bodies[i + k]!)),
      );
    }
  }
  // The engine runs at every due time (as its job does, a second or so apart), and once an hour.
  const start = s.clock.now();
  const end = start + DAYS * 86_400_000;
  for (let t = start; t <= end; ) {
    s.clock.set(t);
    await runTasksOnce(s.ctx);
    const next = await s.ctx.db.query<{ at: Date | null }>(
      `SELECT min(next_due_at) AS at FROM task_schedules WHERE status = 'active'`,
    );
    const due = next[0]?.at ? new Date(next[0].at).getTime() : Number.POSITIVE_INFINITY;
    t = Math.max(t + 1000, Math.min(due, t + 3600_000));
  }
  const rows = await s.ctx.db.query<{
    bot_id: string;
    available_at: Date;
    profile_index: number;
    merchant_url: string;
    item_name: string;
    amount_micros: number;
    category: string;
  }>(
    'SELECT bot_id, available_at, profile_index, merchant_url, item_name, amount_micros, category FROM tasks WHERE available_at >= $1',
    [new Date(start)],
  );
  const byBot = new Map<string, Task[]>(bots.map((b) => [b.bot.bot_id, []]));
  for (const r of rows) {
    byBot.get(r.bot_id)?.push({
      at: new Date(r.available_at).getTime(),
      profile: r.profile_index,
      url: r.merchant_url,
      item: r.item_name,
      amount: Number(r.amount_micros) / 10_000,
      category: r.category,
    });
  }
  return bots.map((b) => ({
    real: b.card.real_profile_index,
    observed: { tasks: byBot.get(b.bot.bot_id)!, cron: crons.get(b.bot.bot_id) },
  }));
}

beforeAll(async () => {
  // One world: two days without schedules, then two days after every owner scheduled a purchase.
  // Decoy shops have a host each (DECOY_SHOP_BASE_URL with {shop}); the default (every shop on
  // BASE_URL's host) is measured on the same tasks with each decoy host replaced by that one host.
  svc = await createTestService({ env: { DECOY_SHOP_BASE_URL: 'https://{shop}.shops.example' } });
  const bots = await simBots(svc, BOTS, WORLD);
  without.push(...(await simulate(svc, bots, false)));
  withShopHosts.push(...(await simulate(svc, bots, true)));
  withSchedules.push(...onOneHost(withShopHosts));
}, 900_000);

const WORLD = { fundCents: () => 10_000, card: { per_transaction_cents: 5000, daily_cents: 20_000 } };

/** The same tasks as if every decoy shop were on BASE_URL's host (the default). */
function onOneHost(trials: Trial<Observed>[]): Trial<Observed>[] {
  return trials.map((t) => ({
    real: t.real,
    observed: {
      ...t.observed,
      tasks: t.observed.tasks.map((x) => ({
        ...x,
        url: x.url.replace(/^https:\/\/[a-z0-9-]+\.shops\.example/, 'http://localhost:8080'),
      })),
    },
  }));
}

/**
 * The second stage of the classifiers of random draws (judgeNoisy), played once if a test asks for
 * it: as many owners again, who schedule at once (the two days without schedules showed no tasks).
 */
let extra: Promise<Trial<Observed>[]> | undefined;
const more = () => {
  extra ??= simBots(svc, BOTS, { ...WORLD, first: BOTS }).then((bots) => simulate(svc, bots, true));
  return extra;
};

afterAll(async () => {
  await svc?.close();
});

const of = (o: Observed, i: number) => o.tasks.filter((t) => t.profile === i);
/** A profile's median time of day; a profile without tasks is never the guess (−∞ after sign). */
const timeOfDay = (o: Observed, i: number, sign: 1 | -1) => {
  const ts = of(o, i).map((t) => minuteOfDay(t.at));
  return ts.length === 0 ? Number.NEGATIVE_INFINITY : sign * median(ts);
};
const minuteOfDay = (at: number) => Math.floor(at / 60_000) % 1440;
const host = (url: string) => new URL(url).host;
const catalogue = new Set(SHOPS.map((s) => s.slug));

const classifiers = {
  'never tasked': (o: Observed) => per((i) => (of(o, i).length === 0 ? 1 : 0)),
  'tasked most often': (o: Observed) => per((i) => of(o, i).length),
  'tasked least often': (o: Observed) => per((i) => -of(o, i).length),
  'earliest in the day': (o: Observed) => per((i) => timeOfDay(o, i, -1)),
  'latest in the day': (o: Observed) => per((i) => timeOfDay(o, i, 1)),
  'middle time of day': (o: Observed) => {
    const times = per((i) => median(of(o, i).map((t) => minuteOfDay(t.at))) || 0);
    const m = median(times);
    return times.map((x) => -Math.abs(x - m));
  },
  'roundest times (on the hour)': (o: Observed) =>
    per((i) => of(o, i).filter((t) => minuteOfDay(t.at) % 60 === 0).length / Math.max(1, of(o, i).length)),
  'roundest times (quarter hours)': (o: Observed) =>
    per((i) => of(o, i).filter((t) => minuteOfDay(t.at) % 15 === 0).length / Math.max(1, of(o, i).length)),
  'first task of all': (o: Observed) => {
    const first = [...o.tasks].sort((a, b) => a.at - b.at)[0];
    return per((i) => (first?.profile === i ? 1 : 0));
  },
  'category differs': (o: Observed) =>
    per(
      (i) =>
        of(o, i).filter((t) => o.tasks.filter((u) => u.category === t.category).length < o.tasks.length / 2)
          .length,
    ),
};
/** Amounts: a shadow's is a catalogue price (cheapest items near $4–$6), the owner's anything. */
const amount = (o: Observed, i: number) => median(of(o, i).map((t) => t.amount)) || 0;
const catalogueClassifiers = {
  'middle amount': (o: Observed) => {
    const amounts = per((i) => amount(o, i));
    const m = median(amounts);
    return amounts.map((x) => -Math.abs(Math.log(x || 1) - Math.log(m || 1)));
  },
  'lowest amount': (o: Observed) => per((i) => -amount(o, i)),
  'merchant host differs from the others': (o: Observed) =>
    per((i) => {
      const h = of(o, i).map((t) => host(t.url))[0];
      return h === undefined
        ? 0
        : o.tasks.filter((t) => host(t.url) !== h).length / Math.max(1, o.tasks.length);
    }),
  'merchant not in the public shop catalogue': (o: Observed) =>
    per((i) => of(o, i).filter((t) => !SHOPS.some((s) => t.url.includes(`/merchant/${s.slug}/`))).length),
  'odd price (not a catalogue price)': (o: Observed) =>
    per(
      (i) =>
        of(o, i).filter((t) => !SHOPS.some((s) => s.products.some((p) => p.priceCents === t.amount))).length,
    ),
};

describe('split knowledge: tasks', () => {
  it('with owner schedules: pacing, timing, amounts and the tasked index do not single out the real profile', async () => {
    const [stage, fail] = [
      13 * chanceOfFalseFailure(withSchedules.length),
      13 * chanceOfFalseFailure(2 * withSchedules.length),
    ];
    console.log(
      `[split-knowledge] tasks: P(a classifier above the limit by chance) ≤ ${stage.toExponential(1)} for a second stage, ≤ ${fail.toExponential(1)} for a failure`,
    );
    if (BOTS >= 1000) expect(fail).toBeLessThan(1e-6);
    await judgeNoisy(
      'tasks (owner schedules)',
      withSchedules,
      {
        ...classifiers,
        'all combined': combine(Object.values(classifiers)),
        ...catalogueClassifiers,
      },
      async () => onOneHost(await more()),
      {
        residual: {
          'middle amount': 'shadows buy catalogue products, whose prices have a floor',
          'lowest amount': 'shadows buy catalogue products, whose prices have a floor',
          'merchant host differs from the others':
            'decoy shops share BASE_URL; set DECOY_SHOP_BASE_URL=https://{shop}.<domain>',
          'merchant not in the public shop catalogue': 'shadows buy from the service\u2019s own shops',
          'odd price (not a catalogue price)': 'shadows buy from the service\u2019s own shops',
        },
      },
    );
  }, 900_000);

  it('with a host per shop (DECOY_SHOP_BASE_URL with {shop}), merchant hosts no longer stand out', async () => {
    await judgeNoisy(
      'tasks (a host per shop)',
      withShopHosts,
      {
        'merchant host differs from the others':
          catalogueClassifiers['merchant host differs from the others'],
        'never tasked': classifiers['never tasked'],
        'middle time of day': classifiers['middle time of day'],
      },
      more,
    );
    // Shadows never name the real profile, and each shadow has its own shop.
    for (const t of withShopHosts) {
      const decoyHosts = new Set(
        t.observed.tasks.filter((x) => x.profile !== t.real).map((x) => host(x.url)),
      );
      for (const h of decoyHosts) if (!catalogue.has(h.split('.')[0]!)) throw new Error(`decoy host ${h}`);
    }
  }, 900_000);

  it('without owner schedules there are no tasks at all, so no index is the never-tasked one', () => {
    if (without.some((t) => t.observed.tasks.length > 0)) throw new Error('decoy tasks without a schedule');
    judge('tasks (no schedules)', without, { 'never tasked': classifiers['never tasked'] });
  });
});
