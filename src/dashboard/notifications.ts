import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { signLink } from './signedLinks.ts';

// E-mails to owners about their bots: a purchase held for approval, with one-click approve and
// deny links. The links are signed (signedLinks.ts) for one confirmation and one owner, expire with
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
  amount_cents: number;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  category: string | null;
  expires_at: Date;
  [key: string]: unknown;
}

function dollars(cents: number): string {
  return `$${(cents / 100).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}

/**
 * Mails the owner about a real purchase held for approval. Called by the checkout engine after its
 * transaction committed; never throws (a failed mail is logged; the approvals inbox still lists it).
 */
export async function notifyHeldPurchase(ctx: AppContext, confirmationId: string): Promise<void> {
  try {
    const c = await maybeOne<HeldRow>(
      ctx.db,
      `SELECT c.id, c.owner_id, o.email, b.name AS bot_name, c.amount_cents, c.merchant_name, c.merchant_url,
              c.item_name, c.category, c.expires_at
         FROM checkout_confirmations c
         JOIN bots b ON b.id = c.bot_id AND b.owner_id = c.owner_id
         JOIN owners o ON o.id = c.owner_id
        WHERE c.id = $1 AND c.is_real AND c.status = 'pending' AND c.expires_at IS NOT NULL`,
      [confirmationId],
    );
    if (!c) return;
    const expiresAt = new Date(c.expires_at).getTime();
    const approve = oneClickUrl(ctx, 'approve', c.owner_id, c.id, expiresAt);
    const deny = oneClickUrl(ctx, 'deny', c.owner_id, c.id, expiresAt);
    const inbox = new URL('/approvals', ctx.config.baseUrl).toString();
    const minutes = Math.max(1, Math.round((expiresAt - ctx.clock.now()) / 60_000));
    const amount = dollars(Number(c.amount_cents));
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
      'If you did not expect this, deny it and freeze the bot’s wallet on its page.',
    ].join('\n');
    await ctx.mailer.send({
      to: c.email,
      subject: `Approve ${amount} at ${c.merchant_name} for ${c.bot_name}?`,
      text,
    });
  } catch (err) {
    ctx.logger.error({ err, confirmation_id: confirmationId }, 'approval e-mail failed');
  }
}

/**
 * Mails the owner when a purchase took the balance the bot can spend (the wallet less the decoy
 * reserve) below the low-balance mark (the wallet.balance_low event, once per crossing). After
 * commit, best effort, never throws.
 */
export async function notifyBalanceLow(ctx: AppContext, botId: string): Promise<void> {
  try {
    const row = await maybeOne<{ email: string; bot_name: string; available_cents: number }>(
      ctx.db,
      `SELECT o.email, b.name AS bot_name, w.available_cents - w.decoy_spent_cents - w.decoy_held_cents AS available_cents
         FROM bots b JOIN owners o ON o.id = b.owner_id JOIN wallets w ON w.bot_id = b.id
        WHERE b.id = $1`,
      [botId],
    );
    if (!row) return;
    const page = new URL(`/bots/${botId}`, ctx.config.baseUrl).toString();
    const balance = dollars(Number(row.available_cents));
    await ctx.mailer.send({
      to: row.email,
      subject: `${row.bot_name}'s wallet is low: ${balance} left`,
      text: [
        `${row.bot_name} can spend ${balance} after its latest purchase.`,
        'Purchases that do not fit are refused. (Decoy purchases count too, so that the bot cannot tell them from real ones; part of what they took comes back with your next funding.)',
        '',
        `Add funds on the bot's page: ${page}`,
      ].join('\n'),
    });
  } catch (err) {
    ctx.logger.error({ err, bot_id: botId }, 'low-balance e-mail failed');
  }
}
