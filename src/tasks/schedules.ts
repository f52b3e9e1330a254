import type { CardRow, ProfileRow } from '../cards/service.ts';
import { audit } from '../owners/audit.ts';
import { assertOwnedBot, lockOwnedBot } from '../owners/locks.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { microsToUsd } from '../platform/money.ts';
import { iso } from '../platform/time.ts';
import { nextOccurrence, parseCron, parseTimezone } from './cron.ts';
import { createShadows, followSchedule } from './shadows.ts';
import { present } from '../platform/present.ts';

// Owner schedules: recurring real purchase tasks. The cron expression (5 fields or
// a nickname such as @daily, no seconds) is read in the schedule's IANA time zone. Instructions are
// checked like a checkout request when the schedule is created, against the bot's cards.

export interface ScheduleInstructions {
  card_id?: string;
  /** The card's real profile when given (the default): a schedule buys for real. */
  profile_index?: number;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  amount_cents: number;
  category?: string;
}

export interface StoredInstructions {
  profile_index: number;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  amount_cents: number;
  category: string;
}

export interface ScheduleRow {
  id: string;
  bot_id: string;
  owner_id: string;
  card_id: string;
  cron: string;
  timezone: string;
  instructions: StoredInstructions;
  status: 'active' | 'paused' | 'deleted';
  /** Set on a decoy shadow of an owner schedule (src/tasks/shadows.ts); never shown to anyone. */
  shadow_of: string | null;
  shadow_offset_ms: number;
  next_due_at: Date | null;
  last_due_at: Date | null;
  created_at: Date;
  updated_at: Date;
  [key: string]: unknown;
}

/** The category a task gets when the owner names none (tasks always carry one). */
export const DEFAULT_CATEGORY = 'general';
/** Active and paused schedules a bot may have at once. */
export const MAX_SCHEDULES_PER_BOT = 50;
const invalid = (field: string, message: string) => new ApiError('validation_error', message, { field });

function validateUrl(raw: string): void {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw invalid('instructions.merchant_url', 'instructions.merchant_url must be an absolute http(s) URL.');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw invalid('instructions.merchant_url', 'instructions.merchant_url must be an absolute http(s) URL.');
  }
}

export function presentSchedule(s: ScheduleRow) {
  return {
    schedule_id: s.id,
    bot_id: s.bot_id,
    cron: s.cron,
    timezone: s.timezone,
    status: s.status,
    instructions: { card_id: s.card_id, ...s.instructions },
    next_run_at: s.status === 'active' && s.next_due_at ? iso(s.next_due_at) : null,
    last_run_at: s.last_due_at ? iso(s.last_due_at) : null,
    created_at: iso(s.created_at),
    updated_at: iso(s.updated_at),
  };
}

async function resolveScheduleCard(
  tx: Queryable,
  botId: string,
  cardId: string | undefined,
): Promise<CardRow> {
  if (cardId !== undefined) {
    const card = await maybeOne<CardRow>(tx, 'SELECT * FROM cards WHERE id = $1 AND bot_id = $2', [
      cardId,
      botId,
    ]);
    if (!card) throw new ApiError('card_not_found', 'instructions.card_id was not found for this bot.');
    return card;
  }
  const cards = await tx.query<CardRow>(
    `SELECT * FROM cards WHERE bot_id = $1 AND status <> 'pending_activation' ORDER BY created_at LIMIT 2`,
    [botId],
  );
  if (cards.length === 0) {
    throw new ApiError('card_not_found', 'This bot has no activated card: add and activate one first.');
  }
  if (cards.length > 1) {
    throw new ApiError('card_id_required', 'This bot has several cards: name one with instructions.card_id.');
  }
  return present(cards[0], 'the one activated card');
}

export async function createSchedule(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  body: { cron: string; timezone: string; instructions: ScheduleInstructions },
) {
  const now = ctx.clock.now();
  const timezone = parseTimezone(body.timezone);
  const cron = parseCron(body.cron, timezone);
  const next = nextOccurrence(cron, now);
  if (next === null) throw invalid('cron', 'cron never fires at a future time.');
  const ins = body.instructions;
  for (const [field, value] of Object.entries({ cron: body.cron, timezone: body.timezone, ...ins })) {
    // PostgreSQL text cannot hold NUL; refuse it as bad input instead of failing on insert.
    if (typeof value === 'string' && value.includes('\u0000')) {
      throw invalid(
        field === 'cron' || field === 'timezone' ? field : `instructions.${field}`,
        `${field} contains a NUL character.`,
      );
    }
  }
  validateUrl(ins.merchant_url);
  const category = ins.category?.trim() ? ins.category.trim() : DEFAULT_CATEGORY;
  for (const field of ['merchant_name', 'item_name'] as const) {
    if (!ins[field].trim())
      throw invalid(`instructions.${field}`, `instructions.${field} must not be blank.`);
  }
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    const existing = await tx.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM task_schedules WHERE bot_id = $1 AND status <> 'deleted' AND shadow_of IS NULL`,
      [botId],
    );
    if (Number(existing[0]?.n ?? 0) >= MAX_SCHEDULES_PER_BOT) {
      throw new ApiError(
        'conflict',
        `A bot can have at most ${MAX_SCHEDULES_PER_BOT} schedules; delete one first.`,
      );
    }
    const card = await resolveScheduleCard(tx, botId, ins.card_id);
    if (card.status === 'pending_activation') {
      throw new ApiError('card_not_active', 'Activate the card before scheduling purchases with it.');
    }
    // A schedule buys for real: its tasks use the real profile, and every other profile gets a
    // shadow (shadows.ts). One on a decoy profile would buy nothing (a decoy's digits complete no
    // card) and would leave the real profile the one never tasked (docs/security.md).
    if (ins.profile_index !== undefined && ins.profile_index !== card.real_profile_index) {
      throw invalid(
        'instructions.profile_index',
        `A schedule buys for real, with the card's real profile (${card.real_profile_index}): leave profile_index out or name that one.`,
      );
    }
    const profile = await maybeOne<ProfileRow>(
      tx,
      'SELECT * FROM card_profiles WHERE card_id = $1 AND profile_index = $2',
      [card.id, card.real_profile_index],
    );
    if (!profile?.enabled) {
      throw new ApiError('invalid_profile', 'No permissions found for the given profile_index.', {
        field: 'instructions.profile_index',
      });
    }
    const stored: StoredInstructions = {
      profile_index: card.real_profile_index,
      merchant_name: ins.merchant_name.trim(),
      merchant_url: ins.merchant_url,
      item_name: ins.item_name.trim(),
      amount_cents: ins.amount_cents,
      category,
    };
    const id = newId('schedule');
    const rows = await tx.query<ScheduleRow>(
      `INSERT INTO task_schedules (id, bot_id, owner_id, card_id, cron, timezone, instructions, status,
         next_due_at, created_at, updated_at)
       VALUES ($1,$2,$3,$4,$5,$6,$7,'active',$8,$9,$9) RETURNING *`,
      [
        id,
        botId,
        ownerId,
        card.id,
        body.cron.trim().replace(/\s+/g, ' '),
        timezone,
        JSON.stringify(stored),
        new Date(next),
        new Date(now),
      ],
    );
    const created = present(rows[0], 'the schedule row just written');
    await createShadows(ctx, tx, created, card, now);
    await audit(tx, {
      ownerId,
      botId,
      action: 'schedule.created',
      details: { schedule_id: id, cron: body.cron, timezone, card_id: card.id, ...stored },
      at: now,
    });
    return presentSchedule(created);
  });
}

export async function listSchedules(ctx: AppContext, ownerId: string, botId: string) {
  await assertOwnedBot(ctx.db, ownerId, botId);
  const rows = await ctx.db.query<ScheduleRow>(
    `SELECT * FROM task_schedules WHERE bot_id = $1 AND status <> 'deleted' AND shadow_of IS NULL
      ORDER BY created_at, id`,
    [botId],
  );
  return { schedules: rows.map(presentSchedule) };
}

/** Pause, resume or delete. Resuming starts from the next occurrence after now (no catch-up). */
export async function changeSchedule(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  scheduleId: string,
  action: 'pause' | 'resume' | 'delete',
) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    const s = await maybeOne<ScheduleRow>(
      tx,
      `SELECT * FROM task_schedules WHERE id = $1 AND bot_id = $2 AND status <> 'deleted' AND shadow_of IS NULL
        FOR UPDATE`,
      [scheduleId, botId],
    );
    if (!s) throw new ApiError('not_found', 'Schedule not found.');
    let status = s.status;
    let next = s.next_due_at === null ? null : new Date(s.next_due_at).getTime();
    if (action === 'pause') status = 'paused';
    if (action === 'delete') status = 'deleted';
    if (action === 'resume' && s.status !== 'active') {
      status = 'active';
      next = nextOccurrence(parseCron(s.cron, s.timezone), now);
    }
    const rows = await tx.query<ScheduleRow>(
      `UPDATE task_schedules SET status = $2, next_due_at = $3, updated_at = $4 WHERE id = $1 RETURNING *`,
      [s.id, status, next === null ? null : new Date(next), new Date(now)],
    );
    await followSchedule(tx, s, status, now);
    await audit(tx, {
      ownerId,
      botId,
      action: `schedule.${action === 'delete' ? 'deleted' : action === 'pause' ? 'paused' : 'resumed'}`,
      details: { schedule_id: s.id },
      at: now,
    });
    return presentSchedule(present(rows[0], 'the schedule row'));
  });
}

/** Recent tasks of a bot for its owner (who knows which profile is real, so decoys are marked). */
export async function listTasks(ctx: AppContext, ownerId: string, botId: string, limit: number) {
  await assertOwnedBot(ctx.db, ownerId, botId);
  const rows = await ctx.db.query<{
    id: string;
    card_id: string;
    is_decoy: boolean;
    schedule_id: string | null;
    due_at: Date;
    available_at: Date;
    profile_index: number;
    merchant_name: string;
    merchant_url: string;
    item_name: string;
    amount_micros: number;
    category: string;
    status: string;
    confirmation_id: string | null;
    completed_at: Date | null;
  }>(
    `SELECT * FROM tasks WHERE bot_id = $1 AND status <> 'planned'
      ORDER BY available_at DESC, id DESC LIMIT $2`,
    [botId, limit],
  );
  return {
    tasks: rows.map((t) => ({
      task_id: t.id,
      kind: t.is_decoy ? ('decoy' as const) : ('scheduled' as const),
      schedule_id: t.schedule_id,
      card_id: t.card_id,
      profile_index: t.profile_index,
      merchant_name: t.merchant_name,
      merchant_url: t.merchant_url,
      item_name: t.item_name,
      amount_usd: microsToUsd(Number(t.amount_micros)),
      category: t.category,
      status: t.status,
      confirmation_id: t.confirmation_id,
      due_at: iso(t.due_at),
      available_at: iso(t.available_at),
      completed_at: t.completed_at ? iso(t.completed_at) : null,
    })),
  };
}
