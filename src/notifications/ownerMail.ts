import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import type { Mail } from '../platform/mailer.ts';
import { BURST_MIN_PURCHASES, BURST_WINDOW_MINUTES } from '../checkout/bursts.ts';
import { signLink } from '../dashboard/signedLinks.ts';
import { microsToUsd } from '../platform/money.ts';

// E-mails to owners about their bots (sent by the owner-mail job, src/notifications/job.ts): a
// purchase held for approval, with one-click approve and deny links, a low balance, and a top-up
// request (decided in the approvals inbox). The links are signed (signedLinks.ts) for one confirmation and one owner, expire with
// the approval window and are single use because a confirmation is decided once. Opening a link
// only shows a confirmation page; the decision is its POST button (mail scanners open links).

export type OneClickDecision = 'approve' | 'deny';

/** The signed link's purpose binds the decision and the owner: a link cannot be turned into the other one. */
export function oneClickPurpose(decision: OneClickDecision, ownerId: string): string {
  return `purchase-${decision}:${ownerId}`;
}

export function oneClickUrl(
  ctx: AppContext,
  decision: OneClickDecision,
  ownerId: string,
  confirmationId: string,
  expiresAt: number,
): string {
  const query = signLink(ctx, oneClickPurpose(decision, ownerId), confirmationId, expiresAt);
  return new URL(`/approvals/one-click/${decision}?${query}`, ctx.config.baseUrl).toString();
}

interface HeldRow {
  id: string;
  owner_id: string;
  email: string;
  bot_name: string;
  amount_micros: number;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  category: string | null;
  expires_at: Date;
  /** Held purchases of the bot asked within BURST_WINDOW_MINUTES up to this one, this one included. */
  recent: number;
  [key: string]: unknown;
}

function dollars(micros: number): string {
  return `$${microsToUsd(micros).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 })}`;
}

/**
 * The mail about a purchase held for approval (on any profile: the mail names the purchase, never
 * the profile), or null when it is no longer pending.
 */
export async function heldPurchaseMail(ctx: AppContext, confirmationId: string): Promise<Mail | null> {
  const c = await maybeOne<HeldRow>(
    ctx.db,
    `SELECT c.id, c.owner_id, o.email, b.name AS bot_name, c.amount_micros, c.merchant_name, c.merchant_url,
            c.item_name, c.category, c.expires_at,
            (SELECT count(*)::int FROM checkout_confirmations x
              WHERE x.bot_id = c.bot_id AND x.expires_at IS NOT NULL
                AND x.created_at > c.created_at - make_interval(mins => $2) AND x.created_at <= c.created_at) AS recent
       FROM checkout_confirmations c
       JOIN bots b ON b.id = c.bot_id AND b.owner_id = c.owner_id
       JOIN owners o ON o.id = c.owner_id
      WHERE c.id = $1 AND c.status = 'pending' AND c.expires_at IS NOT NULL`,
    [confirmationId, BURST_WINDOW_MINUTES],
  );
  if (!c) return null;
  const expiresAt = new Date(c.expires_at).getTime();
  if (expiresAt <= ctx.clock.now()) return null;
  const approve = oneClickUrl(ctx, 'approve', c.owner_id, c.id, expiresAt);
  const deny = oneClickUrl(ctx, 'deny', c.owner_id, c.id, expiresAt);
  const inbox = new URL('/approvals', ctx.config.baseUrl).toString();
  const minutes = Math.max(1, Math.round((expiresAt - ctx.clock.now()) / 60_000));
  const amount = dollars(Number(c.amount_micros));
  const until = new Date(expiresAt).toISOString().replace('T', ' ').slice(0, 16);
  const text = [
    `${c.bot_name} wants to spend ${amount} and is waiting for your decision.`,
    '',
    `  Item:      ${c.item_name}`,
    `  Merchant:  ${c.merchant_name} (${c.merchant_url})`,
    ...(c.category ? [`  Category:  ${c.category}`] : []),
    `  Amount:    ${amount}`,
    `  Decide by: ${until} UTC (in about ${minutes} min); after that it expires and nothing is paid.`,
    '',
    `Approve: ${approve}`,
    '',
    `Deny:    ${deny}`,
    '',
    'Each link opens a page where you confirm with one button. The links work once and only until',
    `the purchase expires. You can also decide in your approvals inbox: ${inbox}`,
    '',
    ...(Number(c.recent) >= BURST_MIN_PURCHASES
      ? [
          `${c.bot_name} has asked for ${Number(c.recent)} purchases in ${BURST_WINDOW_MINUTES} minutes. If you did not`,
          'expect them, its API key may be in someone else’s hands: deny them all and freeze its wallet.',
        ]
      : ['If you did not expect this, deny it and freeze the bot’s wallet on its page.']),
  ].join('\n');
  return {
    to: c.email,
    subject: `Approve ${amount} at ${c.merchant_name} for ${c.bot_name}?`,
    text,
    messageId: `held.${c.id}@${new URL(ctx.config.baseUrl).hostname}`,
  };
}

/**
 * The mail about a wallet.balance_low event: what the bot can spend (the wallet less the decoy
 * reserve) fell below the low-balance mark.
 */
export async function balanceLowMail(ctx: AppContext, eventId: string): Promise<Mail | null> {
  const row = await maybeOne<{ email: string; bot_id: string; bot_name: string; available_micros: number }>(
    ctx.db,
    `SELECT o.email, b.id AS bot_id, b.name AS bot_name,
            w.available_micros - w.decoy_spent_micros - w.decoy_held_micros AS available_micros
       FROM events e JOIN bots b ON b.id = e.bot_id JOIN owners o ON o.id = b.owner_id JOIN wallets w ON w.bot_id = b.id
      WHERE e.id = $1`,
    [eventId],
  );
  if (!row) return null;
  const page = new URL(`/bots/${row.bot_id}`, ctx.config.baseUrl).toString();
  const balance = dollars(Number(row.available_micros));
  return {
    to: row.email,
    subject: `${row.bot_name}'s wallet is low: ${balance} left`,
    text: [
      `${row.bot_name} can spend ${balance} after its latest purchase.`,
      'Purchases that do not fit are refused. (Decoy purchases count too, so that the bot cannot tell them from real ones; part of what they took comes back with your next funding.)',
      '',
      `Add funds on the bot's page: ${page}`,
    ].join('\n'),
    messageId: `low.${eventId}@${new URL(ctx.config.baseUrl).hostname}`,
  };
}

/** The mail about a bot's top-up request, or null when it is no longer open. */
export async function topupRequestMail(ctx: AppContext, topupId: string): Promise<Mail | null> {
  const t = await maybeOne<{
    id: string;
    email: string;
    bot_id: string;
    bot_name: string;
    amount_micros: number;
    reason: string;
    expires_at: Date;
  }>(
    ctx.db,
    `SELECT t.id, o.email, b.id AS bot_id, b.name AS bot_name, t.amount_micros, t.reason, t.expires_at
       FROM topup_requests t
       JOIN bots b ON b.id = t.bot_id AND b.owner_id = t.owner_id
       JOIN owners o ON o.id = t.owner_id
      WHERE t.id = $1 AND t.status = 'pending' AND t.expires_at > $2`,
    [topupId, new Date(ctx.clock.now())],
  );
  if (!t) return null;
  const amount = dollars(Number(t.amount_micros));
  const inbox = new URL('/approvals', ctx.config.baseUrl).toString();
  const until = new Date(t.expires_at).toISOString().replace('T', ' ').slice(0, 16);
  return {
    to: t.email,
    subject: `${t.bot_name} asks you for ${amount}`,
    text: [
      `${t.bot_name} asks you to add ${amount} to its wallet.`,
      '',
      // The reason is the bot's own text (one line, control characters removed): quoted, not trusted.
      `  The bot's reason: "${t.reason}"`,
      `  Amount:           ${amount}`,
      `  Open until:       ${until} UTC; unanswered, it expires and nothing is paid.`,
      '',
      `Approve or decline in your approvals inbox: ${inbox}`,
      'Approving adds the amount to the wallet at once. You can also decline with a note for the bot.',
      '',
      'If you did not expect this, decline it and freeze the bot’s wallet on its page.',
    ].join('\n'),
    messageId: `topup.${t.id}@${new URL(ctx.config.baseUrl).hostname}`,
  };
}
