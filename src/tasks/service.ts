import { emitEvents } from '../events/outbox.ts';
import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { microsToCentsFloor, usdText } from '../platform/money.ts';

// Purchase tasks as the bot sees them. A real task (from an owner schedule) and
// a decoy (planned by the engine) are rows of one table with one shape; nothing here branches on
// is_decoy, so the answer, its timing and the checkout that follows are alike for both.

/** A task handed out stays with the bot this long; asking again returns the same task meanwhile. */
export const LEASE_MS = 60 * 60 * 1000;
/** An available task nobody took up expires this long after it became available. */
export const TASK_LIFETIME_MS = 24 * 60 * 60 * 1000;

export const NO_TASK_MESSAGE = 'No task is available right now. Ask again later.';

export interface TaskRow {
  id: string;
  bot_id: string;
  card_id: string;
  is_decoy: boolean;
  schedule_id: string | null;
  due_at: Date;
  available_at: Date | null;
  expires_at: Date | null;
  profile_index: number;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  amount_micros: number;
  category: string;
  status: 'planned' | 'available' | 'in_checkout' | 'fulfilled' | 'failed' | 'expired';
  leased_until: Date | null;
  handed_out_at: Date | null;
  confirmation_id: string | null;
  [key: string]: unknown;
}

export function taskMessage(
  t: Pick<TaskRow, 'item_name' | 'merchant_name' | 'amount_micros' | 'profile_index'>,
) {
  return `Buy "${t.item_name}" from ${t.merchant_name} for ${usdText(Number(t.amount_micros))} with payment profile ${t.profile_index}: call POST /api/v1/bot/merchant/checkout with these instructions and task_id.`;
}

function present(t: TaskRow, includeCard: boolean) {
  return {
    has_task: true as const,
    task_type: 'purchase' as const,
    task_id: t.id,
    instructions: {
      profile_index: t.profile_index,
      merchant_name: t.merchant_name,
      merchant_url: t.merchant_url,
      item_name: t.item_name,
      amount_cents: microsToCentsFloor(Number(t.amount_micros)),
      category: t.category,
      // Only a bot with several active cards needs card_id to check out (else 400 card_id_required).
      ...(includeCard ? { card_id: t.card_id } : {}),
    },
    message: taskMessage(t),
  };
}

/**
 * POST /api/v1/bot/tasks/next. The task already leased to the bot comes back until it is used or
 * its lease lapses; otherwise the oldest available task is leased for LEASE_MS.
 */
export async function nextTask(ctx: AppContext, botId: string) {
  const now = ctx.clock.now();
  const at = new Date(now);
  return ctx.db.transaction(async (tx) => {
    const leased = await tx.query<TaskRow>(
      `SELECT * FROM tasks WHERE bot_id = $1 AND status = 'available' AND leased_until > $2
        ORDER BY handed_out_at, id LIMIT 1`,
      [botId, at],
    );
    let task = leased[0];
    if (!task) {
      // Two calls at once lock the same oldest row in turn; the second keeps the first one's lease.
      const rows = await tx.query<TaskRow>(
        `UPDATE tasks SET
           leased_until = CASE WHEN leased_until > $2 THEN leased_until ELSE $3 END,
           handed_out_at = CASE WHEN leased_until > $2 THEN handed_out_at ELSE $2 END
         WHERE id = (SELECT id FROM tasks
                      WHERE bot_id = $1 AND status = 'available' AND expires_at > $2
                      ORDER BY available_at, id LIMIT 1 FOR UPDATE)
         RETURNING *`,
        [botId, at, new Date(now + LEASE_MS)],
      );
      task = rows[0];
    }
    if (!task) return { has_task: false as const, message: NO_TASK_MESSAGE };
    const cards = await tx.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cards WHERE bot_id = $1 AND status = 'active'`,
      [botId],
    );
    return present(task, Number(cards[0]?.n ?? 0) > 1);
  });
}

/** task.available, for real and decoy tasks alike (a bot must not tell them apart by events either). */
/** task.available for each task produced by one tick, in the order given (one statement). */
export async function emitTasksAvailable(
  tx: Queryable,
  tasks: ReadonlyArray<{ botId: string; taskId: string }>,
  at: number,
) {
  await emitEvents(
    tx,
    tasks.map((t) => ({
      botId: t.botId,
      type: 'task.available' as const,
      data: {
        task_id: t.taskId,
        task_type: 'purchase',
        description: 'A purchase task is available: fetch it with POST /api/v1/bot/tasks/next.',
      },
      at,
    })),
  );
}
