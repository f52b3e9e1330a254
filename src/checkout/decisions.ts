import type { CardRow } from '../cards/service.ts';
import { audit } from '../owners/audit.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { centsToUsd } from '../platform/money.ts';
import { iso, type WindowKind } from '../platform/time.ts';
import { captureDecoyHold, captureHold, releaseDecoyHold, releaseHold } from '../wallet/ledger.ts';
import { settleX402Hold } from '../x402/service.ts';
import { burstsOf } from './bursts.ts';
import { subtractFromCounters } from './counters.ts';
import { counterSpecs } from './guardrails.ts';
import type { StatusResponse } from './schemas.ts';
import { cardDetails, emitPurchaseEvent } from './service.ts';
import { onCheckoutDecided } from './taskLink.ts';

// Deciding a pending confirmation: the owner approves (capture the hold) or denies (release it), or
// the window elapses (expire: release). A held purchase is the same object on every profile of a
// card (docs/security.md): the owner decides it in the approvals inbox, which shows the purchase
// (merchant, item, amount) and never the profile, and approving a decoy moves no real money (its
// memo rows are captured instead). The service itself never decides a hold but by expiry.
// Every decision locks the confirmation row first (FOR UPDATE), then counters and wallet in the
// checkout's order, and changes only a row still 'pending': a confirmation is decided once.

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
  amount_cents: number;
  status: 'pending' | 'approved' | 'denied' | 'expired';
  created_at: Date;
  expires_at: Date | null;
  decided_at: Date | null;
  decided_by: string | null;
  [key: string]: unknown;
}

type Outcome = 'approved' | 'denied' | 'expired';

/** Moves a locked, pending confirmation to its outcome with its ledger rows, counters and event. */
async function settle(
  tx: Queryable,
  c: ConfirmationRow,
  outcome: Outcome,
  decidedBy: string,
  now: number,
  ctx?: AppContext,
) {
  const heldAt = new Date(c.created_at).getTime();
  if (c.rail === 'partner_wallet') {
    // A held x402 payment: its counters and partner-wallet ledger rows (and, approved, the signature).
    await settleX402Hold(ctx, tx, c, outcome, now);
  } else {
    if (outcome !== 'approved') {
      const specs = counterSpecs({
        botId: c.bot_id,
        ownerId: c.owner_id,
        cardId: c.card_id,
        profileIndex: c.profile_index,
        isReal: c.is_real,
        profileWindow: c.profile_window,
      });
      await subtractFromCounters(tx, specs, c.amount_cents, heldAt);
    }
    if (c.is_real) {
      if (outcome === 'approved') await captureHold(tx, c.bot_id, c.amount_cents, now, c.id);
      else await releaseHold(tx, c.bot_id, c.amount_cents, now, c.id);
    } else if (outcome === 'approved') await captureDecoyHold(tx, c.bot_id, c.amount_cents, now, c.id);
    else await releaseDecoyHold(tx, c.bot_id, c.amount_cents, now, c.id);
  }
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
      amountCents: c.amount_cents,
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

function isDue(c: ConfirmationRow, now: number): boolean {
  return c.status === 'pending' && c.expires_at !== null && new Date(c.expires_at).getTime() <= now;
}

/** What the service applies to a due confirmation, on any profile: expiry. */
async function settleDue(tx: Queryable, c: ConfirmationRow, now: number): Promise<void> {
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
      details: { confirmation_id: c.id, amount_cents: c.amount_cents },
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
    amount_usd: centsToUsd(outcome.c.amount_cents),
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

/** GET /api/v1/bot/merchant/checkout/status. A due confirmation is settled first, so a poll never reports a stale 'pending'. */
export async function checkoutStatus(ctx: AppContext, botId: string, confirmationId: string) {
  const now = ctx.clock.now();
  // Held x402 payments are polled at /api/v1/bot/x402/payments/{id}.
  const query = `SELECT * FROM checkout_confirmations WHERE id = $1 AND bot_id = $2 AND rail = 'card_wallet'`;
  let c = await maybeOne<ConfirmationRow>(ctx.db, query, [confirmationId, botId]);
  if (!c) throw new ApiError('not_found', 'Confirmation not found.');
  if (isDue(c, now)) {
    c = await ctx.db.transaction(async (tx) => {
      // Confirmations are never deleted: the row read above is still there.
      const locked = await one<ConfirmationRow>(tx, `${query} FOR UPDATE`, [confirmationId, botId]);
      if (isDue(locked, now)) {
        await settleDue(tx, locked, now);
        return one<ConfirmationRow>(tx, query, [confirmationId, botId]);
      }
      return locked;
    });
  }
  const body: StatusResponse = {
    confirmation_id: c.id,
    status: c.status,
    amount_usd: centsToUsd(c.amount_cents),
    merchant_name: c.merchant_name,
    item_name: c.item_name,
    message: STATUS_MESSAGES[c.status],
  };
  if (c.status === 'approved') {
    // card_id is a foreign key: the card exists.
    const card = await one<CardRow>(
      ctx.db,
      'SELECT id, secret_enc, profiles_enc, missing_position, created_at FROM cards WHERE id = $1',
      [c.card_id],
    );
    const details = cardDetails(ctx, card, c.profile_index, c.is_real);
    body.missing_digits = details.missing_digits;
    body.expiry_month = details.expiry_month;
    body.expiry_year = details.expiry_year;
  }
  if (c.status === 'pending' && c.expires_at) body.expires_at = iso(c.expires_at);
  return body;
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

/** The one row a query must find; its absence is a programming or data error (500), never a guess. */
async function one<T extends Record<string, unknown>>(
  q: Queryable,
  sql: string,
  params: unknown[],
): Promise<T> {
  const row = await maybeOne<T>(q, sql, params);
  return row ?? missing(`row of: ${sql}`);
}

function missing(what: string): never {
  throw new Error(`expected ${what}`);
}

const STATUS_MESSAGES: Record<ConfirmationRow['status'], string> = {
  pending: 'Waiting for the owner to approve or deny the purchase.',
  approved:
    'Purchase approved. Complete the card number of your profile with missing_digits and use the expiry shown.',
  denied: 'The owner denied this purchase.',
  expired: 'The owner did not decide in time; the purchase expired.',
};

/**
 * Pending confirmations of all the owner's bots, on every profile alike: the list shows the
 * purchase, never the profile (docs/security.md). `bursts` names the bots that asked for several
 * purchases in a few minutes, which is what someone holding a stolen key and the profiles file does
 * when they probe all six profiles: the owner sees every one of those purchases here.
 */
export async function listApprovals(ctx: AppContext, ownerId: string) {
  const rows = await ctx.db.query<ConfirmationRow & { bot_name: string }>(
    `SELECT c.*, b.name AS bot_name FROM checkout_confirmations c JOIN bots b ON b.id = c.bot_id
      WHERE c.owner_id = $1 AND b.owner_id = $1 AND c.status = 'pending' AND c.expires_at > $2
      ORDER BY c.created_at, c.id`,
    [ownerId, new Date(ctx.clock.now())],
  );
  const approvals = rows.map((c) => ({
    confirmation_id: c.id,
    bot_id: c.bot_id,
    bot_name: c.bot_name,
    // A held x402 payment has no card.
    card_id: c.rail === 'card_wallet' ? c.card_id : null,
    rail: c.rail,
    amount_usd: centsToUsd(c.amount_cents),
    merchant_name: c.merchant_name,
    merchant_url: c.merchant_url,
    item_name: c.item_name,
    category: c.category,
    task_id: c.task_id,
    created_at: iso(c.created_at),
    // The query keeps rows with expires_at > now only.
    expires_at: iso(c.expires_at ?? missing(`expires_at of pending confirmation ${c.id}`)),
  }));
  return { approvals, bursts: burstsOf(rows) };
}
