import type { Queryable } from '../platform/db/port.ts';

// The one seam between checkouts and scheduled purchase tasks (a later issue fills it in).
//
// Today: checkTaskForCheckout accepts any task_id (it is only stored on the confirmation, so the
// tasks work can find it later) and onCheckoutDecided does nothing. Both run inside the checkout's
// or the decision's transaction, so the tasks work can make them reject a checkout (throw an
// ApiError) or mark a task fulfilled atomically with the money movement.

export interface TaskCheckoutContext {
  botId: string;
  taskId: string;
  cardId: string;
  profileIndex: number;
  amountCents: number;
  merchantName: string;
  merchantUrl: string;
  itemName: string;
  category: string | null;
  at: number;
}

/** Called before the guardrail chain when a checkout names a task_id. Currently accepts every task_id. */
export async function checkTaskForCheckout(_tx: Queryable, _checkout: TaskCheckoutContext): Promise<void> {}

/**
 * Called when a checkout that named a task reaches a state: 'approved' (at once or by the owner),
 * 'pending', 'denied' or 'expired'. Currently does nothing.
 */
export async function onCheckoutDecided(
  _tx: Queryable,
  _decision: {
    botId: string;
    taskId: string;
    confirmationId: string;
    status: 'approved' | 'pending' | 'denied' | 'expired';
    at: number;
  },
): Promise<void> {}
