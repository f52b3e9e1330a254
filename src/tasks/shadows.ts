import { randomInt } from 'node:crypto';
import type { Cron } from 'croner';
import type { CardRow, ProfileRow } from '../cards/service.ts';
import { productUrl, SHOPS, type Shop, shopsForCategory } from '../merchants/catalog.ts';
import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { newId } from '../platform/ids.ts';
import { nextOccurrence, parseCron } from './cron.ts';
import type { ScheduleRow, StoredInstructions } from './schedules.ts';
import { present } from '../platform/present.ts';
import { microsToCentsFloor } from '../platform/money.ts';

// Decoy tasks as shadows of the owner's schedules (docs/tasks.md, docs/security.md). For every
// owner schedule (on the card's real profile: schedules.ts), each other enabled profile of the card gets a hidden schedule of its own: the
// same cron moved by a fixed offset, and a purchase from the service's shops like the owner's. So
// every profile is tasked at the same pace and in the same kind of time, and nothing the engine
// does depends on which profile a checkout named. Without owner schedules there are no decoy
// tasks at all: a stream of tasks on the five decoys alone would name them and never the real one.
//
// Offsets keep the owner's minute and move by whole hours: a window of up to SHADOW_WINDOW_MS is
// placed uniformly around the owner's time and every shadow takes a uniform whole hour of it, so the
// owner's time is one draw among six from the same window (not the middle one) and no stream is
// rounder than another. Schedules that fire more than once a day keep offset zero: moving them would
// break the alignment owners give them (every six hours from midnight), which is itself a tell.

/** Widest window the shadows of one schedule spread over. */
export const SHADOW_WINDOW_MS = 4 * 3600_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;

/** The shortest gap between the cron's next occurrences. */
export function cronPeriod(cron: Cron, from: number): number {
  let period = Number.POSITIVE_INFINITY;
  let t = nextOccurrence(cron, from);
  for (let i = 0; i < 24 && t !== null; i++) {
    const next = nextOccurrence(cron, t);
    if (next === null) break;
    period = Math.min(period, next - t);
    t = next;
  }
  return period;
}

/** Offsets (ms) for n shadows of a schedule with this period: whole hours of a window placed uniformly around zero. */
export function shadowOffsets(
  periodMs: number,
  n: number,
  draw: (max: number) => number = randomInt,
): number[] {
  if (periodMs < DAY) return Array.from({ length: n }, () => 0);
  const steps = Math.floor(Math.min(SHADOW_WINDOW_MS, periodMs - HOUR) / HOUR);
  const shift = draw(steps + 1);
  return Array.from({ length: n }, () => (draw(steps + 1) - shift) * HOUR);
}

/** Next due time of a schedule moved by offsetMs, strictly after `after`. */
export function nextShiftedOccurrence(cron: Cron, after: number, offsetMs: number): number | null {
  const next = nextOccurrence(cron, after - offsetMs);
  return next === null ? null : next + offsetMs;
}

/** Width (natural log) of the window of amounts the shadows of one schedule are drawn from. */
const AMOUNT_WINDOW = Math.log(2);
const unit = () => randomInt(1_000_000) / 1_000_000;

/**
 * A shop's product for a shadow of the owner's purchase, within the profile's limits, priced near a
 * target drawn like the offsets: uniformly in a window (a factor of 2 wide) placed uniformly around
 * the owner's amount (`windowStart`, shared by the schedule's shadows), so the owner's amount is
 * not the middle one.
 */
export function shadowPurchase(
  ctx: AppContext,
  card: Pick<CardRow, 'per_transaction_micros' | 'daily_micros'>,
  profile: Pick<ProfileRow, 'profile_index' | 'allowance_micros'>,
  real: StoredInstructions,
  usedShops: Set<string>,
  windowStart: number = Math.log(real.amount_cents) - unit() * AMOUNT_WINDOW,
): StoredInstructions {
  // Products are priced in whole cents; the limits are micros.
  const cap = Math.max(
    1,
    microsToCentsFloor(
      Math.min(
        Number(card.per_transaction_micros),
        Number(card.daily_micros),
        Number(profile.allowance_micros),
      ),
    ),
  );
  const affordable = (s: Shop) => !usedShops.has(s.slug) && s.products.some((x) => x.priceCents <= cap);
  const matching = shopsForCategory(real.category).filter(affordable);
  const candidates = matching.length > 0 ? matching : SHOPS.filter(affordable);
  const pool = candidates.length > 0 ? candidates : [...SHOPS];
  const shop = present(pool[randomInt(pool.length)], 'a shop');
  usedShops.add(shop.slug);
  const target = Math.exp(windowStart + unit() * AMOUNT_WINDOW);
  const within = shop.products.filter((x) => x.priceCents <= cap);
  const products =
    within.length > 0 ? within : [...shop.products].sort((a, b) => a.priceCents - b.priceCents);
  const sorted = [...products].sort(
    (a, b) => Math.abs(a.priceCents - target) - Math.abs(b.priceCents - target),
  );
  const product = present(sorted[randomInt(Math.min(2, sorted.length))], 'a product');
  return {
    profile_index: profile.profile_index,
    merchant_name: shop.name,
    merchant_url: productUrl(ctx.config.decoyShopBaseUrl, shop, product),
    item_name: product.name,
    amount_cents: product.priceCents,
    category: real.category,
  };
}

/** Creates the shadows of a new owner schedule (in the schedule's transaction). */
export async function createShadows(
  ctx: AppContext,
  tx: Queryable,
  schedule: ScheduleRow,
  card: CardRow,
  now: number,
): Promise<number> {
  const profiles = await tx.query<ProfileRow>(
    `SELECT * FROM card_profiles WHERE card_id = $1 AND enabled AND profile_index <> $2
      ORDER BY profile_index`,
    [card.id, card.real_profile_index],
  );
  if (profiles.length === 0) return 0;
  const cron = parseCron(schedule.cron, schedule.timezone);
  const offsets = shadowOffsets(cronPeriod(cron, now), profiles.length);
  const usedShops = new Set<string>();
  const amountWindow = Math.log(schedule.instructions.amount_cents) - unit() * AMOUNT_WINDOW;
  for (const [i, profile] of profiles.entries()) {
    const offset = present(offsets[i], `the offset of profile ${i}`);
    const next = nextShiftedOccurrence(cron, now, offset);
    await tx.query(
      `INSERT INTO task_schedules (id, bot_id, owner_id, card_id, cron, timezone, instructions, status,
         next_due_at, created_at, updated_at, shadow_of, shadow_offset_ms)
       VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$10,$11,$12)`,
      [
        newId('schedule'),
        schedule.bot_id,
        schedule.owner_id,
        card.id,
        schedule.cron,
        schedule.timezone,
        JSON.stringify(shadowPurchase(ctx, card, profile, schedule.instructions, usedShops, amountWindow)),
        schedule.status,
        next === null ? null : new Date(next),
        new Date(now),
        schedule.id,
        offset,
      ],
    );
  }
  return profiles.length;
}

/** Shadows follow their schedule's pause, resume and deletion (resume: next occurrence after now). */
export async function followSchedule(
  tx: Queryable,
  schedule: Pick<ScheduleRow, 'id' | 'cron' | 'timezone'>,
  status: ScheduleRow['status'],
  now: number,
): Promise<void> {
  const shadows = await tx.query<ScheduleRow & { shadow_offset_ms: number }>(
    'SELECT * FROM task_schedules WHERE shadow_of = $1 AND status <> $2 ORDER BY id FOR UPDATE',
    [schedule.id, 'deleted'],
  );
  const cron = parseCron(schedule.cron, schedule.timezone);
  for (const s of shadows) {
    let next = s.next_due_at === null ? null : new Date(s.next_due_at).getTime();
    if (status === 'active' && s.status !== 'active') {
      next = nextShiftedOccurrence(cron, now, Number(s.shadow_offset_ms));
    }
    await tx.query('UPDATE task_schedules SET status = $2, next_due_at = $3, updated_at = $4 WHERE id = $1', [
      s.id,
      status,
      next === null ? null : new Date(next),
      new Date(now),
    ]);
  }
}
