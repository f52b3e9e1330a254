import { randomInt } from 'node:crypto';
import type { CardRow, ProfileRow } from '../cards/service.ts';
import { productUrl, SHOPS, type Shop, shopsForCategory } from '../merchants/catalog.ts';
import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { newId } from '../platform/ids.ts';
import { type ScheduleRow, latestOccurrence, nextOccurrence, parseCron } from './schedules.ts';
import { emitTaskAvailable, TASK_LIFETIME_MS } from './service.ts';

// The task engine: one tick produces due scheduled tasks, plans decoys, releases planned decoys
// whose time has come, and expires tasks nobody took up. It is leader-only: the whole tick runs in
// one transaction behind pg_try_advisory_xact_lock (keyed by schema), so of several instances exactly one works at a
// time; the others skip the tick. (Unique (schedule_id, due_at) and the locked pacing rows make a
// duplicate impossible even without the lock.)
//
// Decoy pacing (DESIGN.md §2), per active card, on its enabled decoy profiles:
// - warm-up: WARMUP_SLOTS decoys over the WARMUP_MS after activation, one at a random time in each
//   12-hour slot (about 2 a day);
// - then about DECOYS_PER_REAL (2, 3, 3 or 4) per real purchase (every real confirmation of the
//   card), at random times between 10 minutes and 20 hours after it;
// - so 24 hours after the last real purchase no decoy is left to plan: the card is idle.
// Amounts and categories follow the real profile's recent confirmations, through the service's own
// shops; without history, a random shop and product under the card's per-transaction limit.

export const TASKS_LOCK = 7_254_006;
export const WARMUP_MS = 48 * 3600_000;
export const WARMUP_SLOTS = 4;
export const DECOY_DELAY_MIN_MS = 10 * 60_000;
export const DECOY_DELAY_MAX_MS = 20 * 3600_000;
/** Decoys appear on 5-minute marks, like most owners' cron schedules. */
const DECOY_GRID_MS = 5 * 60_000;
const COUNTS_PER_REAL = [2, 3, 3, 4];
const DAY_MS = 86_400_000;

export interface TickResult {
  leader: boolean;
  scheduled: number;
  planned: number;
  released: number;
  expired: number;
}

/** One tick of the engine at ctx.clock.now(). Exposed for tests (with a FakeClock) and the job. */
export async function runTasksOnce(ctx: AppContext): Promise<TickResult> {
  return ctx.db.transaction(async (tx) => {
    // Keyed by schema too: advisory locks are per database, and services in different schemas of
    // one database (tests, shared hosting) must not skip each other's ticks.
    const lock = await tx.query<{ locked: boolean }>(
      'SELECT pg_try_advisory_xact_lock($1, hashtext(current_schema())) AS locked',
      [TASKS_LOCK],
    );
    if (!lock[0]?.locked) return { leader: false, scheduled: 0, planned: 0, released: 0, expired: 0 };
    const now = ctx.clock.now();
    const scheduled = await produceScheduledTasks(tx, now);
    const planned = await planDecoys(ctx, tx, now);
    const released = await releasePlanned(tx, now);
    const expired = await expireTasks(tx, now);
    return { leader: true, scheduled, planned, released, expired };
  });
}

async function produceScheduledTasks(tx: Queryable, now: number): Promise<number> {
  const due = await tx.query<ScheduleRow>(
    `SELECT * FROM task_schedules WHERE status = 'active' AND next_due_at <= $1 ORDER BY next_due_at, id
      FOR UPDATE`,
    [new Date(now)],
  );
  let produced = 0;
  for (const s of due) {
    const cron = parseCron(s.cron, s.timezone);
    const dueAt = latestOccurrence(cron, new Date(s.next_due_at!).getTime(), now);
    const ins = s.instructions;
    const inserted = await tx.query<{ id: string }>(
      `INSERT INTO tasks (id, bot_id, card_id, is_decoy, schedule_id, due_at, available_at, expires_at, profile_index,
         merchant_name, merchant_url, item_name, amount_cents, category, status, created_at)
       VALUES ($1,$2,$3,false,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,'available',$6)
       ON CONFLICT (schedule_id, due_at) DO NOTHING RETURNING id`,
      [
        newId('task'),
        s.bot_id,
        s.card_id,
        s.id,
        new Date(dueAt),
        new Date(now),
        new Date(now + TASK_LIFETIME_MS),
        ins.profile_index,
        ins.merchant_name,
        ins.merchant_url,
        ins.item_name,
        ins.amount_cents,
        ins.category,
      ],
    );
    if (inserted[0]) {
      await emitTaskAvailable(tx, s.bot_id, inserted[0].id, now);
      produced++;
    }
    const next = nextOccurrence(cron, Math.max(now, dueAt));
    await tx.query(
      'UPDATE task_schedules SET next_due_at = $2, last_due_at = $3, updated_at = $4 WHERE id = $1',
      [s.id, next === null ? null : new Date(next), new Date(dueAt), new Date(now)],
    );
  }
  return produced;
}

interface PacingRow {
  card_id: string;
  warmup_planned: boolean;
  real_seen_count: number;
  [key: string]: unknown;
}

interface RealPurchase {
  created_at: Date;
  amount_cents: number;
  category: string | null;
  [key: string]: unknown;
}

async function planDecoys(ctx: AppContext, tx: Queryable, now: number): Promise<number> {
  // Only cards with something to do: no pacing row or warm-up yet, or real confirmations not yet
  // answered (an index-only count per card), so an idle fleet costs one query per tick.
  const cards = await tx.query<CardRow & { real_total: number }>(
    `SELECT c.*, r.n AS real_total
       FROM cards c
       JOIN bots b ON b.id = c.bot_id
       LEFT JOIN decoy_pacing p ON p.card_id = c.id
       CROSS JOIN LATERAL (SELECT count(*)::int AS n FROM checkout_confirmations x
                            WHERE x.card_id = c.id AND x.is_real) r
      WHERE c.status = 'active' AND c.activated_at IS NOT NULL AND b.owner_id IS NOT NULL
        AND (p.card_id IS NULL OR NOT p.warmup_planned OR r.n > p.real_seen_count)
      ORDER BY c.id`,
  );
  let planned = 0;
  for (const card of cards) {
    await tx.query(
      `INSERT INTO decoy_pacing (card_id, updated_at) VALUES ($1, $2) ON CONFLICT (card_id) DO NOTHING`,
      [card.id, new Date(now)],
    );
    const pacing = (
      await tx.query<PacingRow>('SELECT * FROM decoy_pacing WHERE card_id = $1 FOR UPDATE', [card.id])
    )[0]!;
    const times: number[] = [];
    let warmupPlanned = pacing.warmup_planned;
    if (!warmupPlanned) {
      const activated = new Date(card.activated_at!).getTime();
      const slot = WARMUP_MS / WARMUP_SLOTS;
      for (let k = 0; k < WARMUP_SLOTS; k++) {
        const t = activated + k * slot + randomInt(Math.floor(slot));
        if (t > now) times.push(t);
      }
      warmupPlanned = true;
    }
    const total = Number(card.real_total);
    let seen = Number(pacing.real_seen_count);
    if (total > seen) {
      const fresh = await tx.query<RealPurchase>(
        `SELECT created_at, amount_cents, category FROM checkout_confirmations
          WHERE card_id = $1 AND is_real ORDER BY created_at, id OFFSET $2`,
        [card.id, seen],
      );
      // What this statement saw (possibly more than the count a moment ago) is what is answered.
      seen += fresh.length;
      for (const r of fresh) {
        const at = new Date(r.created_at).getTime();
        // A purchase older than a day (the engine was down) gets no late decoys: no burst.
        if (at <= now - DAY_MS) continue;
        const count = COUNTS_PER_REAL[randomInt(COUNTS_PER_REAL.length)]!;
        for (let i = 0; i < count; i++) {
          const t = at + randomInt(DECOY_DELAY_MIN_MS, DECOY_DELAY_MAX_MS);
          if (t > now) times.push(t);
        }
      }
    }
    if (times.length > 0) planned += await insertDecoys(ctx, tx, card, times, now);
    await tx.query(
      'UPDATE decoy_pacing SET warmup_planned = $2, real_seen_count = $3, updated_at = $4 WHERE card_id = $1',
      [card.id, warmupPlanned, seen, new Date(now)],
    );
  }
  return planned;
}

/**
 * Which decoy profile a decoy uses: three of the card's decoy profiles are "busy" (about one decoy
 * each per real purchase, like the real profile), the others quiet. Fixed per card (from
 * SECRET_KEY), so the pattern does not shift from day to day.
 */
export function decoyProfileWeights(ctx: AppContext, cardId: string, decoyIndexes: number[]): number[] {
  const ranked = [...decoyIndexes].sort((a, b) =>
    ctx.secrets
      .sign(`decoy-weight:${cardId}:${a}`)
      .localeCompare(ctx.secrets.sign(`decoy-weight:${cardId}:${b}`)),
  );
  const busy = new Set(ranked.slice(0, 3));
  return decoyIndexes.map((i) => (busy.has(i) ? 6 : 1));
}

function pickWeighted<T>(items: T[], weights: number[]): T {
  const total = weights.reduce((a, b) => a + b, 0);
  let roll = randomInt(total);
  for (let i = 0; i < items.length; i++) {
    roll -= weights[i]!;
    if (roll < 0) return items[i]!;
  }
  return items[items.length - 1]!;
}

export interface DecoyContent {
  profileIndex: number;
  shop: Shop;
  merchantUrl: string;
  itemName: string;
  amountCents: number;
  category: string;
}

/** What a decoy buys: a shop and product resembling the real profile's recent purchases. */
export function decoyContent(
  ctx: AppContext,
  card: Pick<CardRow, 'id' | 'per_transaction_cents' | 'daily_cents'>,
  profileIndexes: number[],
  weights: number[],
  history: RealPurchase[],
  allowances: ReadonlyMap<number, number> = new Map(),
): DecoyContent {
  const profileIndex = pickWeighted(profileIndexes, weights);
  const sample = history.length > 0 ? history[randomInt(history.length)]! : null;
  // Within the card's limits and a quarter of the decoy profile's allowance, so decoys are refused
  // by guardrails no more often than the owner's own purchases are.
  const allowance = allowances.get(profileIndex) ?? Number.POSITIVE_INFINITY;
  const cap = Math.max(
    1,
    Math.min(Number(card.per_transaction_cents), Number(card.daily_cents), Math.floor(allowance / 4)),
  );
  const affordable = (s: Shop) => s.products.some((x) => x.priceCents <= cap);
  // The category is the sampled real purchase's, exactly as it was written (so the labels a bot sees
  // on decoys are the labels of its real traffic); the shop is one selling in that category when one
  // has something affordable, else any shop that does, else the one with the cheapest item.
  const realCategory = sample?.category?.trim() ? sample.category.trim() : null;
  const matching = realCategory ? shopsForCategory(realCategory).filter(affordable) : [];
  const candidates = matching.length > 0 ? matching : SHOPS.filter(affordable);
  const shop =
    candidates.length > 0
      ? candidates[randomInt(candidates.length)]!
      : [...SHOPS].sort(
          (a, b) =>
            Math.min(...a.products.map((x) => x.priceCents)) -
            Math.min(...b.products.map((x) => x.priceCents)),
        )[0]!;
  const category = realCategory ?? shop.categories[0]!;
  // Aim at a real amount give or take a quarter; without history, anywhere up to the cap.
  const target = sample
    ? Math.round(Number(sample.amount_cents) * (0.75 + randomInt(51) / 100))
    : 100 + randomInt(Math.max(1, Math.min(cap, 5000)));
  const within = shop.products.filter((x) => x.priceCents <= cap);
  const pool =
    within.length > 0 ? within : [...shop.products].sort((a, b) => a.priceCents - b.priceCents).slice(0, 1);
  const sorted = [...pool].sort((a, b) => Math.abs(a.priceCents - target) - Math.abs(b.priceCents - target));
  // One of the two closest, so the same real amount does not always map to the same product.
  const product = sorted[randomInt(Math.min(2, sorted.length))]!;
  return {
    profileIndex,
    shop,
    merchantUrl: productUrl(ctx.config.decoyShopBaseUrl, shop, product),
    itemName: product.name,
    amountCents: product.priceCents,
    category,
  };
}

async function insertDecoys(
  ctx: AppContext,
  tx: Queryable,
  card: CardRow,
  times: number[],
  now: number,
): Promise<number> {
  const profiles = await tx.query<ProfileRow>(
    'SELECT * FROM card_profiles WHERE card_id = $1 AND enabled AND profile_index <> $2 ORDER BY profile_index',
    [card.id, card.real_profile_index],
  );
  if (profiles.length === 0) return 0;
  const indexes = profiles.map((p) => p.profile_index);
  const weights = decoyProfileWeights(ctx, card.id, indexes);
  const allowances = new Map(profiles.map((p) => [p.profile_index, Number(p.allowance_cents)]));
  const history = await tx.query<RealPurchase>(
    `SELECT created_at, amount_cents, category FROM checkout_confirmations
      WHERE card_id = $1 AND is_real AND created_at > $2 ORDER BY created_at DESC LIMIT 50`,
    [card.id, new Date(now - 30 * DAY_MS)],
  );
  for (const t of times) {
    const c = decoyContent(ctx, card, indexes, weights, history, allowances);
    const due = Math.ceil(t / DECOY_GRID_MS) * DECOY_GRID_MS;
    await tx.query(
      `INSERT INTO tasks (id, bot_id, card_id, is_decoy, due_at, profile_index, merchant_name, merchant_url,
         item_name, amount_cents, category, status, created_at)
       VALUES ($1,$2,$3,true,$4,$5,$6,$7,$8,$9,$10,'planned',$11)`,
      [
        newId('task'),
        card.bot_id,
        card.id,
        new Date(due),
        c.profileIndex,
        c.shop.name,
        c.merchantUrl,
        c.itemName,
        c.amountCents,
        c.category,
        new Date(now),
      ],
    );
  }
  return times.length;
}

/** Planned decoys whose time has come become available (and announced); those of a card no longer active lapse. */
async function releasePlanned(tx: Queryable, now: number): Promise<number> {
  const at = new Date(now);
  const released = await tx.query<{ id: string; bot_id: string }>(
    `UPDATE tasks t SET status = 'available', available_at = $1, expires_at = $2
       FROM cards c
      WHERE c.id = t.card_id AND c.status = 'active' AND t.status = 'planned' AND t.due_at <= $1
      RETURNING t.id, t.bot_id`,
    [at, new Date(now + TASK_LIFETIME_MS)],
  );
  for (const r of released) await emitTaskAvailable(tx, r.bot_id, r.id, now);
  await tx.query(
    `UPDATE tasks SET status = 'expired', completed_at = $1 WHERE status = 'planned' AND due_at <= $1`,
    [at],
  );
  return released.length;
}

/** Available tasks past their lifetime and not under a live lease expire. */
async function expireTasks(tx: Queryable, now: number): Promise<number> {
  const at = new Date(now);
  const rows = await tx.query(
    `UPDATE tasks SET status = 'expired', completed_at = $1
      WHERE status = 'available' AND expires_at <= $1 AND (leased_until IS NULL OR leased_until <= $1)
      RETURNING id`,
    [at],
  );
  return rows.length;
}
