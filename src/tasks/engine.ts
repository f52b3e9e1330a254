import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { newId } from '../platform/ids.ts';
import { latestOccurrence, nextOccurrence, parseCron } from './cron.ts';
import type { ScheduleRow } from './schedules.ts';
import { nextShiftedOccurrence } from './shadows.ts';
import { emitTasksAvailable, TASK_LIFETIME_MS } from './service.ts';
import { present } from '../platform/present.ts';
import { centsToMicros } from '../platform/money.ts';

// The task engine: one tick produces the due tasks of every active schedule — the owner's (real)
// and their decoy shadows (src/tasks/shadows.ts) through one code path — and expires tasks nobody
// took up. It is leader-only: the whole tick runs in one transaction behind
// pg_try_advisory_xact_lock (keyed by schema), so of several instances exactly one works at a time;
// the others skip the tick. (Unique (schedule_id, due_at) makes a duplicate impossible even without
// the lock.) Nothing here reads checkouts: decoy pacing never reacts to which profile was used.

export const TASKS_LOCK = 7_254_006;
export interface TickResult {
  leader: boolean;
  /** Tasks produced from owner schedules. */
  scheduled: number;
  /** Decoy tasks produced from their shadows. */
  shadows: number;
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
    if (!lock[0]?.locked) return { leader: false, scheduled: 0, shadows: 0, expired: 0 };
    const now = ctx.clock.now();
    const produced = await produceScheduledTasks(tx, now);
    const expired = await expireTasks(tx, now);
    return { leader: true, ...produced, expired };
  });
}

async function produceScheduledTasks(
  tx: Queryable,
  now: number,
): Promise<{ scheduled: number; shadows: number }> {
  const due = await tx.query<ScheduleRow>(
    `SELECT * FROM task_schedules WHERE status = 'active' AND next_due_at <= $1 ORDER BY next_due_at, id
      FOR UPDATE`,
    [new Date(now)],
  );
  if (due.length === 0) return { scheduled: 0, shadows: 0 };
  // A tick's work is three statements however many schedules are due (a busy minute — every owner's
  // 09:00 and its shadows — was three statements per schedule): the tasks, their task.available
  // events (in the order of `due`, so a bot's events keep the order one-by-one inserts gave them)
  // and the schedules' next due times.
  const tasks = due.map((s) => {
    const cron = parseCron(s.cron, s.timezone);
    // A shadow runs the owner's cron moved by its offset: computed on the unshifted clock.
    const offset = Number(s.shadow_offset_ms);
    const dueAt =
      latestOccurrence(
        cron,
        new Date(present(s.next_due_at, `next_due_at of due schedule ${s.id}`)).getTime() - offset,
        now - offset,
      ) + offset;
    const next =
      offset === 0
        ? nextOccurrence(cron, Math.max(now, dueAt))
        : nextShiftedOccurrence(cron, Math.max(now, dueAt), offset);
    return { s, id: newId('task'), dueAt, next };
  });
  const column = <T>(f: (t: (typeof tasks)[number]) => T) => tasks.map(f);
  const inserted = await tx.query<{ id: string }>(
    `INSERT INTO tasks (id, bot_id, card_id, is_decoy, schedule_id, due_at, available_at, expires_at, profile_index,
       merchant_name, merchant_url, item_name, amount_micros, category, status, created_at)
     SELECT t.id, t.bot_id, t.card_id, t.is_decoy, t.schedule_id, t.due_at, $13, $14, t.profile_index,
            t.merchant_name, t.merchant_url, t.item_name, t.amount_micros, t.category, 'available', $13
       FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::text[], $6::timestamptz[], $7::int[],
                   $8::text[], $9::text[], $10::text[], $11::bigint[], $12::text[])
            AS t(id, bot_id, card_id, is_decoy, schedule_id, due_at, profile_index, merchant_name, merchant_url,
                 item_name, amount_micros, category)
     ON CONFLICT (schedule_id, due_at) DO NOTHING RETURNING id`,
    [
      column((t) => t.id),
      column((t) => t.s.bot_id),
      column((t) => t.s.card_id),
      column((t) => t.s.shadow_of !== null),
      column((t) => t.s.id),
      column((t) => new Date(t.dueAt)),
      column((t) => t.s.instructions.profile_index),
      column((t) => t.s.instructions.merchant_name),
      column((t) => t.s.instructions.merchant_url),
      column((t) => t.s.instructions.item_name),
      column((t) => centsToMicros(t.s.instructions.amount_cents)),
      column((t) => t.s.instructions.category),
      new Date(now),
      new Date(now + TASK_LIFETIME_MS),
    ],
  );
  const made = new Set(inserted.map((r) => r.id));
  const produced = tasks.filter((t) => made.has(t.id));
  await emitTasksAvailable(
    tx,
    produced.map((t) => ({ botId: t.s.bot_id, taskId: t.id })),
    now,
  );
  await tx.query(
    `UPDATE task_schedules s SET next_due_at = v.next_due_at, last_due_at = v.last_due_at, updated_at = $4
       FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS v(id, next_due_at, last_due_at)
      WHERE s.id = v.id`,
    [
      column((t) => t.s.id),
      column((t) => (t.next === null ? null : new Date(t.next))),
      column((t) => new Date(t.dueAt)),
      new Date(now),
    ],
  );
  const shadows = produced.filter((t) => t.s.shadow_of !== null).length;
  return { scheduled: produced.length - shadows, shadows };
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
