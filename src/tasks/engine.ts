import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { newId } from '../platform/ids.ts';
import { latestOccurrence, nextOccurrence, parseCron } from './cron.ts';
import type { ScheduleRow } from './schedules.ts';
import { nextShiftedOccurrence } from './shadows.ts';
import { emitTaskAvailable, TASK_LIFETIME_MS } from './service.ts';
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
  let scheduled = 0;
  let shadows = 0;
  for (const s of due) {
    const cron = parseCron(s.cron, s.timezone);
    // A shadow runs the owner's cron moved by its offset: computed on the unshifted clock.
    const offset = Number(s.shadow_offset_ms);
    const dueAt =
      latestOccurrence(
        cron,
        new Date(present(s.next_due_at, `next_due_at of due schedule ${s.id}`)).getTime() - offset,
        now - offset,
      ) + offset;
    const isDecoy = s.shadow_of !== null;
    const ins = s.instructions;
    const inserted = await tx.query<{ id: string }>(
      `INSERT INTO tasks (id, bot_id, card_id, is_decoy, schedule_id, due_at, available_at, expires_at, profile_index,
         merchant_name, merchant_url, item_name, amount_micros, category, status, created_at)
       VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,'available',$7)
       ON CONFLICT (schedule_id, due_at) DO NOTHING RETURNING id`,
      [
        newId('task'),
        s.bot_id,
        s.card_id,
        isDecoy,
        s.id,
        new Date(dueAt),
        new Date(now),
        new Date(now + TASK_LIFETIME_MS),
        ins.profile_index,
        ins.merchant_name,
        ins.merchant_url,
        ins.item_name,
        centsToMicros(ins.amount_cents),
        ins.category,
      ],
    );
    if (inserted[0]) {
      await emitTaskAvailable(tx, s.bot_id, inserted[0].id, now);
      if (isDecoy) shadows++;
      else scheduled++;
    }
    const next =
      offset === 0
        ? nextOccurrence(cron, Math.max(now, dueAt))
        : nextShiftedOccurrence(cron, Math.max(now, dueAt), offset);
    await tx.query(
      'UPDATE task_schedules SET next_due_at = $2, last_due_at = $3, updated_at = $4 WHERE id = $1',
      [s.id, next === null ? null : new Date(next), new Date(dueAt), new Date(now)],
    );
  }
  return { scheduled, shadows };
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
