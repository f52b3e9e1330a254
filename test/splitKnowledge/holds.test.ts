import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decideByOwner, processDueConfirmations } from '../../src/spend/holds.ts';
import { ownerMailSettled } from '../../src/notifications/job.ts';
import { TIME_CHARS } from '../../src/platform/ids.ts';
import { checkout, poll } from '../checkout/helpers.ts';
import { activeBot, createTestService, type TestService } from '../support/service.ts';
import {
  CHANCE,
  chanceOfFalseFailure,
  combine,
  judge,
  judgeNoisy,
  LIMIT,
  median,
  per,
  seeded,
  type Trial,
} from './classify.ts';
import { ownerWithWideBudgets, quickCard } from './world.ts';

// Channels of a held purchase in the default mode (every purchase held, ask_for_everything), played
// by the attacker the issue describes: they hold the profiles file and the bot's API key, so they
// see every answer, its time, every event and the balance. In each trial a new card is added to the
// bot (a fresh real profile, drawn by the service) and the attacker asks for the same purchase on
// all six profiles, in a seeded random order, polling each right after its hold (the owner's mail
// is sent meanwhile). The simulated owner reacts to what the inbox shows them, and nothing else:
// an owner who did not expect six purchases denies them all at once (the inbox's "deny all"), one
// who is away lets them expire, a careless one approves them. The attacker then polls each until
// it shows the decision, and reads the purchase.* events.
//
// Two kinds of observation, judged differently (docs/security.md, "How it is measured"):
// - Fake-clock observations (outcomes, decision times, the time inside event ids, the balance): the
//   service treats every profile alike exactly when they tie, so any classifier scores exactly 1/6
//   and cannot fail by chance; a difference in treatment breaks the tie every time.
// - Wall-clock timings (the request right after a hold while the owner's mail goes out, the poll
//   that first shows the decision, which for an expired hold also settles it): noisy, so they are
//   judged in two stages (judgeNoisy): 1,000 trials, and 1,000 more only if a classifier is above
//   the limit over the first, the run failing only if one is above it over all 2,000. The chance of
//   a failure on an unchanged service is then below 10⁻⁶ (chanceOfFalseFailure, Bonferroni over the
//   timing classifiers); one stage of 1,000 trials left about 10⁻⁴, and CI once saw one of them at
//   0.217.

const TRIALS = Number(process.env.SPLIT_KNOWLEDGE_HOLD_TRIALS ?? 1000);
/** Trials that also read the balance around each decision (its classifier ties; it needs no more). */
const BALANCE_TRIALS = 200;
const TRIAL_MS = 20 * 60_000;
const rand = seeded(29);

type Outcome = 'approved' | 'denied' | 'expired';
type Reaction = 'deny' | 'approve' | 'away';

interface Seen {
  /** Wall-clock ms of the hold's checkout, and of the poll right after it. */
  holdMs: number;
  pollAfterHoldMs: number;
  /** The poll that first showed the decision (for an expired hold, the poll that settles it). */
  decisionPollMs: number;
  outcome: Outcome;
  /** Fake-clock time of the purchase.* event, and the time written into its id. */
  eventAt: number;
  eventIdTime: string;
  /** How the balance the bot sees moved across that poll. */
  balanceDelta: number;
}
interface Observed {
  /** seen[i - 1]: profile i. */
  seen: Seen[];
}

let svc: TestService;
const trials: Trial<Observed>[] = [];

/**
 * The simulated owner: a reaction drawn per trial from the owner's habits and from what the inbox
 * item and the mail show them (ids, links and times left out). Six identical purchases get one
 * reaction; an item that showed anything about its profile would get its own.
 */
function reactionTo(shown: string, habit: number): Reaction {
  let h = 2166136261;
  for (const ch of shown) h = Math.imul(h ^ ch.charCodeAt(0), 16777619) >>> 0;
  const roll = ((h ^ Math.floor(habit * 0xffffffff)) >>> 0) / 0xffffffff;
  return roll < 0.6 ? 'deny' : roll < 0.8 ? 'away' : 'approve';
}

let owner: Awaited<ReturnType<typeof ownerWithWideBudgets>>;
let bot: Awaited<ReturnType<typeof activeBot>>;
let habit: number;

beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000000' } });
  owner = await ownerWithWideBudgets(svc);
  bot = await activeBot(svc, owner, { fundCents: 1_000_000 });
  habit = rand();
  trials.push(...(await play(0, TRIALS)));
}, 1_800_000);

/** The second stage of the timing classifiers (judgeNoisy), played once if either test asks for it. */
let extra: Promise<Trial<Observed>[]> | undefined;
const more = () => {
  extra ??= play(TRIALS, TRIALS);
  return extra;
};

/** Plays trials first … first + count − 1 with the same bot and owner (a second stage goes on from the first). */
async function play(first: number, count: number): Promise<Trial<Observed>[]> {
  const out: Trial<Observed>[] = [];
  for (let t = first; t < first + count; t++) {
    svc.clock.advance(TRIAL_MS);
    const trialStart = svc.clock.now();
    // A new card as the card wizard adds it, through the routes' service functions (world.ts).
    const card = await quickCard(svc, owner, bot.bot_id);
    const amount = 100 + Math.floor(rand() * 400);
    const order = [1, 2, 3, 4, 5, 6].sort(() => rand() - 0.5);
    const ids = new Map<number, string>();
    const seen: Partial<Seen>[] = [{}, {}, {}, {}, {}, {}];
    for (const profile of order) {
      let t0 = performance.now();
      const res = await checkout(svc, bot, {
        card_id: card.card_id,
        profile_index: profile,
        merchant_name: 'Acme Books',
        merchant_url: 'https://acme.example/books/1',
        item_name: 'A book',
        amount_cents: amount,
      });
      const holdMs = performance.now() - t0;
      if (res.statusCode !== 202) throw new Error(`expected a hold: ${res.statusCode} ${res.body}`);
      const id = res.json().confirmation_id as string;
      ids.set(profile, id);
      t0 = performance.now();
      const first = await poll(svc, bot, id);
      seen[profile - 1] = { holdMs, pollAfterHoldMs: performance.now() - t0 };
      if (first.json().status !== 'pending') throw new Error(`not pending at once: ${first.body}`);
    }
    await ownerMailSettled(svc.ctx);
    // What the owner is shown: the inbox items and the mails, without ids, links and times.
    const inbox = (await svc.app.inject({ url: '/api/v1/owner/approvals', headers: owner.auth })).json();
    const shown = new Map<string, string>();
    for (const item of inbox.approvals as Array<Record<string, unknown>>) {
      const { confirmation_id, created_at, expires_at, ...rest } = item;
      const mail = svc.mailer.sent.find((m) => m.text.includes(String(confirmation_id)));
      // What the mail says of the purchase (the lines above its links). Below them, the burst line
      // counts the purchases so far ("has asked for 4 purchases"): the owner reacts to the burst
      // as a whole, not to its count at one mail.
      const text = (mail?.text ?? '')
        .split('\nApprove:')[0]
        ?.replaceAll(String(confirmation_id), '')
        .replace(/Decide by:.*/g, '');
      shown.set(String(confirmation_id), `${JSON.stringify(rest)}|${mail?.subject ?? ''}|${text}`);
    }
    svc.mailer.sent.length = 0;
    expect(shown.size).toBe(6);
    // The owner looks a few minutes later and reacts to each item (identical items: one reaction,
    // given to all of them in the same moment, as the inbox's deny-all does).
    svc.clock.advance(60_000 + Math.floor(rand() * 240_000));
    for (const [profile, id] of ids) {
      const reaction = reactionTo(shown.get(id) ?? `missing ${profile}`, habit + t);
      if (reaction === 'away') continue;
      // What POST /owner/approvals/:id/approve|deny calls (untimed: the attacker times its polls).
      await decideByOwner(svc.ctx, owner.id, id, reaction);
    }
    // The attacker polls each hold until it shows a decision: the first such poll is timed (an
    // expired hold is settled by that very poll, as the expiry job would), and the balance it sees
    // before and after it.
    if ([...shown.values()].every((x) => reactionTo(x, habit + t) === 'away')) {
      svc.clock.set(trialStart + 900_000 + 30_000);
    } else {
      svc.clock.advance(30_000);
    }
    const balance = async () =>
      t < BALANCE_TRIALS
        ? Math.round(
            (await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth })).json()
              .balance_usd * 100,
          )
        : 0;
    let before = await balance();
    for (const profile of order) {
      const t0 = performance.now();
      const res = await poll(svc, bot, ids.get(profile) ?? '');
      const ms = performance.now() - t0;
      const status = res.json().status as string;
      if (status === 'pending') throw new Error(`still pending: ${res.body}`);
      const after = await balance();
      const x = seen[profile - 1] as Partial<Seen>;
      x.decisionPollMs = ms;
      x.outcome = status as Outcome;
      x.balanceDelta = after - before;
      before = after;
    }
    const rows = await svc.ctx.db.query<{ id: string; body: string; created_at: Date }>(
      `SELECT id, body, created_at FROM events WHERE bot_id = $1 AND type LIKE 'purchase.%' AND created_at > $2`,
      [bot.bot_id, new Date(trialStart)],
    );
    for (const r of rows) {
      const checkoutId = JSON.parse(r.body).data.checkout_id as string;
      const profile = [...ids].find(([, id]) => id === checkoutId)?.[0];
      if (profile === undefined) continue;
      const s = seen[profile - 1] as Partial<Seen>;
      s.eventAt = new Date(r.created_at).getTime();
      s.eventIdTime = r.id.slice('evt_'.length, 'evt_'.length + TIME_CHARS);
    }
    // Decided holds leave the inbox empty for the next trial.
    await processDueConfirmations(svc.ctx);
    out.push({ real: card.real_profile_index, observed: { seen: seen as Seen[] } });
  }
  return out;
}

afterAll(async () => {
  await svc?.close();
});

const s = (o: Observed, i: number) => o.seen[i - 1] as Seen;
const majority = (o: Observed, f: (x: Seen) => string | number) => {
  const counts = new Map<string | number, number>();
  for (const x of o.seen) counts.set(f(x), (counts.get(f(x)) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1])[0]?.[0];
};

describe('split knowledge: a held purchase, in the default mode', () => {
  it('timing: the request after a hold (owner mail), the hold itself, the poll that shows the decision', async () => {
    const timing = {
      'slowest request right after its hold (owner mail)': (o: Observed) =>
        per((i) => s(o, i).pollAfterHoldMs),
      'slowest hold': (o: Observed) => per((i) => s(o, i).holdMs),
      'slowest first poll showing the decision': (o: Observed) => per((i) => s(o, i).decisionPollMs),
    };
    const all = { ...timing, 'all timings combined': combine(Object.values(timing)) };
    // Statistically sound: the chance that any of these (and the combined classifier of the next
    // test, which ranks timings too) is above the limit on an unchanged service over the first
    // TRIALS trials (a second stage is played), and over both stages (the test fails; judgeNoisy).
    const k = Object.keys(all).length + 1;
    const [stage, fail] = [k * chanceOfFalseFailure(TRIALS), k * chanceOfFalseFailure(2 * TRIALS)];
    console.log(
      `[split-knowledge] holds: ${TRIALS} trials; P(a timing classifier above ${LIMIT.toFixed(3)} by chance) ≤ ${stage.toExponential(1)} for a second stage, ≤ ${fail.toExponential(1)} for a failure`,
    );
    if (TRIALS >= 1000) expect(fail).toBeLessThan(1e-6);
    await judgeNoisy('held purchase: timing', trials, all, more);
    const ms = (real: boolean, f: (x: Seen) => number) =>
      median(trials.flatMap((t) => t.observed.seen.filter((_, i) => (i + 1 === t.real) === real).map(f)));
    console.log(
      `[split-knowledge] median ms, real vs decoy: request after hold ${ms(true, (x) => x.pollAfterHoldMs).toFixed(2)} vs ${ms(false, (x) => x.pollAfterHoldMs).toFixed(2)}; first poll showing the decision ${ms(true, (x) => x.decisionPollMs).toFixed(2)} vs ${ms(false, (x) => x.decisionPollMs).toFixed(2)}`,
    );
  }, 1_800_000);

  it("the owner's reaction, where and when decisions land, the events and the balance tie on every profile", async () => {
    const exact = {
      "owner's reaction: the outcome unlike the others": (o: Observed) =>
        per((i) => (s(o, i).outcome === majority(o, (x) => x.outcome) ? 0 : 1)),
      "owner's reaction: denied": (o: Observed) => per((i) => (s(o, i).outcome === 'denied' ? 1 : 0)),
      "owner's reaction: approved": (o: Observed) => per((i) => (s(o, i).outcome === 'approved' ? 1 : 0)),
      "owner's reaction: left to expire": (o: Observed) =>
        per((i) => (s(o, i).outcome === 'expired' ? 1 : 0)),
      'decision event: earliest': (o: Observed) => per((i) => -s(o, i).eventAt),
      'decision event: latest': (o: Observed) => per((i) => s(o, i).eventAt),
      'decision event: off the 2-second tick': (o: Observed) => per((i) => s(o, i).eventAt % 2000),
      'decision event: time inside its id': (o: Observed) =>
        per((i) => (s(o, i).eventIdTime === majority(o, (x) => x.eventIdTime) ? 0 : 1)),
      'balance moved by the decision unlike the others': (o: Observed) =>
        per((i) => (s(o, i).balanceDelta === majority(o, (x) => x.balanceDelta) ? 0 : 1)),
    };
    const out = judge('held purchase: decisions', trials, exact);
    // Ties are exact: a channel that shows nothing scores 1/6 to the last digit, on every run.
    for (const name of Object.keys(exact)) expect(out[name], name).toBeCloseTo(CHANCE, 9);
    // Combined with the timings it is as noisy as they are, and judged as they are.
    await judgeNoisy(
      'held purchase: decisions and timings',
      trials,
      {
        'all combined (these and the timings)': combine([
          ...Object.values(exact),
          (o: Observed) => per((i) => s(o, i).pollAfterHoldMs),
          (o: Observed) => per((i) => s(o, i).decisionPollMs),
        ]),
      },
      more,
    );
    // Every reaction happened, so each was measured.
    for (const outcome of ['approved', 'denied', 'expired'] as const) {
      expect(
        trials.some((t) => t.observed.seen[0]?.outcome === outcome),
        outcome,
      ).toBe(true);
    }
  }, 1_800_000);
});
