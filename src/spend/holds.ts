import { onCheckoutDecided } from '../checkout/taskLink.ts';
import { settleCardHold } from '../checkout/holds.ts';
import { audit } from '../owners/audit.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { microsToUsd } from '../platform/money.ts';
import { iso, type WindowKind } from '../platform/time.ts';
import { settleX402Hold } from '../x402/service.ts';
import { emitPurchaseEvent } from './events.ts';

// The one life of a held purchase, on both rails: the owner approves (capture the hold) or denies
// (release it), or the window elapses (expire: release). The rail's part of it (counters, ledger
// rows, an x402 authorisation) is its settlement in SETTLE; the confirmation row, its decision,
// the purchase.* event and the task link are the same for both. A held purchase is the same
// object on every profile of a card (docs/security.md): the owner decides it in the approvals
// inbox, which shows the purchase (merchant, item, amount) and never the profile, and approving a
// decoy moves no real money (its memo rows are captured instead). The service itself never
// decides a hold but by expiry.
// Every decision locks the confirmation row first (FOR UPDATE), then counters and wallet in the
// checkout's order, and changes only a row still 'pending': a confirmation is decided once.

/**
 * A rail's part of settling a held purchase, inside the decision's transaction with the
 * confirmation row locked. ctx is given for an owner's decision (an x402 approval signs).
 */
export type HoldSettlement = (
  ctx: AppContext | undefined,
  tx: Queryable,
  c: ConfirmationRow,
  outcome: Outcome,
  now: number,
) => Promise<void>;

const SETTLE: Record<ConfirmationRow['rail'], HoldSettlement> = {
  card_wallet: settleCardHold,
  partner_wallet: settleX402Hold,
};

export interface ConfirmationRow {
  id: string;
  bot_id: string;
  owner_id: string;
  card_id: string;
  /** partner_wallet: a held x402 payment (no card; src/x402/service.ts settles its money). */
  rail: 'card_wallet' | 'partner_wallet';
  profile_index: number;
  is_real: boolean;
  profile_window: WindowKind;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  category: string | null;
  task_id: string | null;
  amount_micros: number;
  status: 'pending' | 'approved' | 'denied' | 'expired';
  created_at: Date;
  expires_at: Date | null;
  decided_at: Date | null;
  decided_by: string | null;
  [key: string]: unknown;
}

export type Outcome = 'approved' | 'denied' | 'expired';

/** Moves a locked, pending confirmation to its outcome with its ledger rows, counters and event. */
async function settle(
  tx: Queryable,
  c: ConfirmationRow,
  outcome: Outcome,
  decidedBy: string,
  now: number,
  ctx?: AppContext,
) {
  // The rail's own part: its counters and ledger rows (and, an approved x402 payment, the signature).
  await SETTLE[c.rail](ctx, tx, c, outcome, now);
  await tx.query(
    'UPDATE checkout_confirmations SET status = $2, decided_at = $3, decided_by = $4 WHERE id = $1',
    [c.id, outcome, new Date(now), decidedBy],
  );
  await emitPurchaseEvent(
    tx,
    `purchase.${outcome}`,
    {
      id: c.id,
      botId: c.bot_id,
      amountMicros: c.amount_micros,
      merchantName: c.merchant_name,
      itemName: c.item_name,
    },
    now,
  );
  if (c.task_id !== null) {
    await onCheckoutDecided(tx, {
      botId: c.bot_id,
      taskId: c.task_id,
      confirmationId: c.id,
      status: outcome,
      at: now,
    });
  }
}

export function isDue(c: ConfirmationRow, now: number): boolean {
  return c.status === 'pending' && c.expires_at !== null && new Date(c.expires_at).getTime() <= now;
}

/** What the service applies to a due confirmation, on any profile: expiry. */
export async function settleDue(tx: Queryable, c: ConfirmationRow, now: number): Promise<void> {
  await settle(tx, c, 'expired', 'expiry', now);
}

/** Owner approves or denies, on any profile. 404 for another owner's; 409 not_pending once decided or expired. */
export async function decideByOwner(
  ctx: AppContext,
  ownerId: string,
  confirmationId: string,
  decision: 'approve' | 'deny',
) {
  const now = ctx.clock.now();
  const outcome = await ctx.db.transaction(async (tx) => {
    const c = await maybeOne<ConfirmationRow>(
      tx,
      `SELECT c.* FROM checkout_confirmations c JOIN bots b ON b.id = c.bot_id
        WHERE c.id = $1 AND b.owner_id = $2 FOR UPDATE OF c`,
      [confirmationId, ownerId],
    );
    if (!c) throw new ApiError('not_found', 'Confirmation not found.');
    if (c.status !== 'pending') return { decided: false as const, status: c.status };
    if (isDue(c, now)) {
      // The window has elapsed but the job has not run yet: expire it now, and refuse the decision.
      await settleDue(tx, c, now);
      return { decided: false as const, status: 'expired' as const };
    }
    const result: Outcome = decision === 'approve' ? 'approved' : 'denied';
    await settle(tx, c, result, 'owner', now, ctx);
    await audit(tx, {
      ownerId,
      botId: c.bot_id,
      action: `purchase.${result}`,
      details: { confirmation_id: c.id, amount_micros: c.amount_micros },
      at: now,
    });
    return { decided: true as const, status: result, c };
  });
  if (!outcome.decided) {
    throw new ApiError('not_pending', `The confirmation is no longer pending (it is ${outcome.status}).`, {
      status: outcome.status,
    });
  }
  return {
    confirmation_id: confirmationId,
    status: outcome.status,
    bot_id: outcome.c.bot_id,
    amount_usd: microsToUsd(outcome.c.amount_micros),
    merchant_name: outcome.c.merchant_name,
    decided_at: iso(now),
  };
}

/**
 * Expires due confirmations, one per transaction. Rows are claimed with
 * FOR UPDATE SKIP LOCKED, so instances running this at once never take the same row, and a row an
 * owner is deciding right now is skipped (its own transaction re-checks the status).
 */
export async function processDueConfirmations(ctx: AppContext, max = 500): Promise<number> {
  let done = 0;
  while (done < max) {
    const now = ctx.clock.now();
    const settled = await ctx.db.transaction(async (tx) => {
      const c = await maybeOne<ConfirmationRow>(
        tx,
        `SELECT * FROM checkout_confirmations
          WHERE status = 'pending' AND coalesce(decide_at, expires_at) <= $1
          ORDER BY coalesce(decide_at, expires_at) LIMIT 1 FOR UPDATE SKIP LOCKED`,
        [new Date(now)],
      );
      if (!c) return false;
      await settleDue(tx, c, now);
      return true;
    });
    if (!settled) break;
    done++;
  }
  return done;
}

/** Settles one confirmation if its time has come (a poll never reports a stale 'pending'). */
export async function settleIfDue(ctx: AppContext, confirmationId: string): Promise<void> {
  const now = ctx.clock.now();
  const c = await maybeOne<ConfirmationRow>(ctx.db, 'SELECT * FROM checkout_confirmations WHERE id = $1', [
    confirmationId,
  ]);
  if (!c || !isDue(c, now)) return;
  await ctx.db.transaction(async (tx) => {
    const locked = await maybeOne<ConfirmationRow>(
      tx,
      'SELECT * FROM checkout_confirmations WHERE id = $1 FOR UPDATE',
      [confirmationId],
    );
    if (locked && isDue(locked, now)) await settleDue(tx, locked, now);
  });
}
