import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { microsToCentsFloor } from '../platform/money.ts';
import { ApiError } from '../platform/errors.ts';

// The one seam between checkouts and purchase tasks (src/tasks/). Both functions run inside the
// checkout's or the decision's transaction: a checkout that names a task is refused (and changes
// nothing) unless it matches the task, and the task follows the checkout's outcome atomically with
// the money movement. Real and decoy tasks take exactly the same path.

export interface TaskCheckoutContext {
  botId: string;
  taskId: string;
  cardId: string;
  profileIndex: number;
  amountMicros: number;
  merchantName: string;
  merchantUrl: string;
  itemName: string;
  category: string | null;
  at: number;
}

interface LinkedTask {
  id: string;
  card_id: string;
  status: string;
  profile_index: number;
  merchant_name: string;
  merchant_url: string;
  amount_micros: number;
  expires_at: Date | null;
  leased_until: Date | null;
  [key: string]: unknown;
}

const ms = (d: Date | null) => (d === null ? null : new Date(d).getTime());

/**
 * Called before the guardrail chain when a checkout names a task_id. Locks the task (so two
 * checkouts for one task are serialised) and throws 400 validation_error when the task is not the
 * bot's, is no longer open, or does not match the request's card, profile, merchant or amount.
 */
export async function checkTaskForCheckout(tx: Queryable, c: TaskCheckoutContext): Promise<void> {
  const task = await maybeOne<LinkedTask>(
    tx,
    `SELECT id, card_id, status, profile_index, merchant_name, merchant_url, amount_micros, expires_at, leased_until
       FROM tasks WHERE id = $1 AND bot_id = $2 FOR UPDATE`,
    [c.taskId, c.botId],
  );
  if (!task || task.status === 'planned') {
    throw new ApiError('validation_error', 'task_id does not name one of your tasks.', { field: 'task_id' });
  }
  const lapsed =
    task.status === 'available' &&
    (ms(task.expires_at) ?? Number.POSITIVE_INFINITY) <= c.at &&
    (ms(task.leased_until) ?? 0) <= c.at;
  if (task.status !== 'available' || lapsed) {
    const state =
      task.status === 'in_checkout'
        ? 'already has a checkout waiting for a decision'
        : task.status === 'fulfilled'
          ? 'is already fulfilled'
          : task.status === 'failed'
            ? 'has failed (its checkout was denied or expired)'
            : 'has expired';
    throw new ApiError('validation_error', `This task ${state}; ask for the next task.`, {
      field: 'task_id',
    });
  }
  const mismatches: Array<{ field: string; task: unknown; request: unknown }> = [];
  if (task.card_id !== c.cardId) mismatches.push({ field: 'card_id', task: task.card_id, request: c.cardId });
  if (task.profile_index !== c.profileIndex) {
    mismatches.push({ field: 'profile_index', task: task.profile_index, request: c.profileIndex });
  }
  if (task.merchant_name !== c.merchantName) {
    mismatches.push({ field: 'merchant_name', task: task.merchant_name, request: c.merchantName });
  }
  if (task.merchant_url !== c.merchantUrl) {
    mismatches.push({ field: 'merchant_url', task: task.merchant_url, request: c.merchantUrl });
  }
  if (Number(task.amount_micros) !== c.amountMicros) {
    mismatches.push({
      field: 'amount_cents',
      task: microsToCentsFloor(Number(task.amount_micros)),
      request: microsToCentsFloor(c.amountMicros),
    });
  }
  const [first] = mismatches;
  if (first !== undefined) {
    throw new ApiError(
      'validation_error',
      `The checkout does not match task ${task.id}: ${mismatches.map((m) => m.field).join(', ')} differ${mismatches.length === 1 ? 's' : ''} from the task's instructions.`,
      { field: first.field, mismatches },
    );
  }
}

/**
 * Called when a checkout that named a task reaches a state: 'pending' (held for approval: the task
 * waits for the decision and is not handed out again), 'approved' (fulfilled), 'denied' or
 * 'expired' (failed).
 */
export async function onCheckoutDecided(
  tx: Queryable,
  d: {
    botId: string;
    taskId: string;
    confirmationId: string;
    status: 'approved' | 'pending' | 'denied' | 'expired';
    at: number;
  },
): Promise<void> {
  if (d.status === 'pending') {
    await tx.query(
      `UPDATE tasks SET status = 'in_checkout', confirmation_id = $3
        WHERE id = $1 AND bot_id = $2 AND status = 'available'`,
      [d.taskId, d.botId, d.confirmationId],
    );
    return;
  }
  await tx.query(
    `UPDATE tasks SET status = $4, confirmation_id = $3, completed_at = $5
      WHERE id = $1 AND bot_id = $2 AND status IN ('available', 'in_checkout')
        AND (confirmation_id IS NULL OR confirmation_id = $3)`,
    [d.taskId, d.botId, d.confirmationId, d.status === 'approved' ? 'fulfilled' : 'failed', new Date(d.at)],
  );
}
