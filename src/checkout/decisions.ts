import type { CardRow } from '../cards/service.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { microsToUsd } from '../platform/money.ts';
import { iso } from '../platform/time.ts';
import { type ConfirmationRow, isDue, settleDue } from '../spend/holds.ts';
import { burstsOf } from './bursts.ts';
import type { StatusResponse } from './schemas.ts';
import { cardDetails } from './service.ts';

// The card side of held purchases: the bot's poll of a checkout (a due one expired first, through
// the one hold life in src/spend/holds.ts, where owners' decisions and the expiry job are) and the
// owner's approvals inbox, which lists held purchases of both rails alike.

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
    amount_usd: microsToUsd(c.amount_micros),
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
    amount_usd: microsToUsd(c.amount_micros),
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
