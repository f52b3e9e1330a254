import type { AppContext } from '../platform/context.ts';
import { html, type SafeHtml } from './html.ts';
import { type Column, dataTable, when } from './layout.ts';

// Turning form input into service input, and records into friendly words.

/** "25", "25.5", "$1,250.00" → cents; undefined when it is not an amount with at most 2 decimals. */
export function parseUsdToCents(input: unknown): number | undefined {
  if (typeof input !== 'string') return undefined;
  const text = input
    .trim()
    .replace(/^\$\s*/, '')
    .replace(/,/g, '');
  const match = /^(\d{1,10})(?:\.(\d{1,2}))?$/.exec(text);
  if (!match) return undefined;
  const cents = Number(match[1]) * 100 + Number((match[2] ?? '').padEnd(2, '0'));
  return Number.isSafeInteger(cents) ? cents : undefined;
}

/** Fixed messages for ?notice=… after a redirect (never reflected text). */
export const NOTICES: Record<string, string> = {
  claimed: 'The bot is yours now. Its wallet is active; add funds to let it spend.',
  funded: 'Funds added.',
  frozen: 'Wallet frozen. The bot cannot spend until you unfreeze it.',
  unfrozen: 'Wallet unfrozen. The bot can spend again within its guardrails.',
  rail: 'Payment rail updated.',
  guardrails: 'Master guardrails saved.',
};

/** Approval modes of a card in words (card pages and the bot page's cards table). */
export const APPROVAL_WORDS: Record<string, string> = {
  ask_for_everything: 'Ask me for every purchase',
  auto_approve_under_threshold: 'Auto-approve below a threshold',
  auto_approve_by_category: 'Auto-approve chosen categories',
  follow_card: 'Follow the card',
};

/**
 * Limits that cannot all be reached: a per-purchase limit above the per-day one, or a per-day
 * limit above the per-month one. Undefined when they are in order. Amounts in cents.
 */
export function limitOrderWarning(limits: {
  per?: number;
  day?: number;
  month?: number;
}): string | undefined {
  const problems: string[] = [];
  if (limits.per !== undefined && limits.day !== undefined && limits.per > limits.day)
    problems.push(`per purchase (${usdText(limits.per)}) is above per day (${usdText(limits.day)})`);
  if (limits.day !== undefined && limits.month !== undefined && limits.day > limits.month)
    problems.push(`per day (${usdText(limits.day)}) is above per month (${usdText(limits.month)})`);
  if (
    problems.length === 0 &&
    limits.per !== undefined &&
    limits.month !== undefined &&
    limits.per > limits.month
  )
    problems.push(`per purchase (${usdText(limits.per)}) is above per month (${usdText(limits.month)})`);
  if (problems.length === 0) return undefined;
  return `Saved, but check the limits: ${problems.join(' and ')}, so the larger limit can never be reached.`;
}

function usdText(cents: number): string {
  return `$${(cents / 100).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}

const AUDIT_WORDS: Record<string, string> = {
  'bot.claimed': 'Claimed the bot',
  'bot.paired': 'Bot paired with a pairing code',
  'pairing_code.created': 'Created a pairing code',
  'wallet.funded': 'Added funds',
  'wallet.frozen': 'Froze the wallet',
  'wallet.unfrozen': 'Unfroze the wallet',
  'rail.updated': 'Changed a payment rail',
  'x402.key_created': 'Created the partner wallet',
  'x402.key_imported': 'Imported a partner wallet key',
  'x402.settings_updated': 'Changed partner wallet limits or lists',
  'master_guardrails.updated': 'Changed master guardrails',
  'api_key.rotated': 'Rotated the API key',
  'webhook_secret.rotated': 'Rotated the webhook secret',
  'owner.signed_in': 'Signed in',
  'owner.signed_out': 'Signed out',
  'card.started': 'Started a card',
  'card.activated': 'Activated a card',
  'card.updated': 'Changed card settings',
  'card.profile_updated': 'Changed a payment profile',
  'purchase.approved': 'Approved a purchase',
  'purchase.denied': 'Denied a purchase',
  'webhook_delivery.retried': 'Retried a webhook delivery',
  'tunnel_token.rotated': 'Rotated the tunnel token',
  'schedule.created': 'Created a schedule',
  'schedule.paused': 'Paused a schedule',
  'schedule.resumed': 'Resumed a schedule',
  'schedule.deleted': 'Deleted a schedule',
};

export function auditWords(action: string): string {
  return AUDIT_WORDS[action] ?? action;
}

/** Field names of audit details in words. */
const FIELD_WORDS: Record<string, string> = {
  amount: 'Amount',
  per_transaction: 'Per purchase',
  daily_budget: 'Per day',
  monthly_budget: 'Per month',
  daily: 'Per day',
  monthly: 'Per month',
  approval_threshold: 'Approval threshold',
  approval_mode: 'Approval',
  approved_categories: 'Categories',
  allowance: 'Allowance',
  allowance_window: 'Allowance window',
  approval_rule: 'Approval',
  enabled: 'Usable',
  status: 'Status',
  rail: 'Rail',
  previous_status: 'Was',
  profile_index: 'Profile',
  cron: 'When',
  timezone: 'Time zone',
  label: 'Name',
  decoy_reserve_returned: 'Decoy reserve returned',
  ip: 'From IP address',
  category: 'Category',
  item: 'Item',
  address: 'Address',
};

/** Enum values in words (statuses, modes, rails, windows). */
const VALUE_WORDS: Record<string, string> = {
  ...APPROVAL_WORDS,
  card_wallet: 'Card wallet',
  partner_wallet: 'Partner wallet',
  active: 'on',
  inactive: 'off',
  frozen: 'frozen',
  failed: 'failed',
  pending: 'pending',
  day: 'per day',
  week: 'per week',
  month: 'per month',
};

/** Details that are references to other records: shown by name (resolved by auditNames). */
const REFERENCE_FIELDS = new Set(['card_id', 'confirmation_id', 'schedule_id', 'delivery_id']);
/** Details too internal for the owner's log. */
const HIDDEN_FIELDS = new Set(['instructions', 'shadow_count', 'item_name', 'merchant_name', 'merchant_url']);

/**
 * Names of the records that audit entries refer to (cards, purchases, schedules, webhook
 * deliveries), looked up for this owner only: id → words.
 */
export async function auditNames(
  ctx: AppContext,
  ownerId: string,
  entries: Array<{ details: unknown }>,
): Promise<Map<string, string>> {
  const ids = new Set<string>();
  for (const e of entries) {
    if (!e.details || typeof e.details !== 'object') continue;
    for (const [key, value] of Object.entries(e.details as Record<string, unknown>)) {
      if (REFERENCE_FIELDS.has(key) && typeof value === 'string') ids.add(value);
    }
  }
  const names = new Map<string, string>();
  if (ids.size === 0) return names;
  const list = [...ids];
  const rows = await ctx.db.query<{ id: string; name: string }>(
    `SELECT c.id, coalesce(c.label, 'Card') AS name FROM cards c JOIN bots b ON b.id = c.bot_id
      WHERE c.id = ANY($1::text[]) AND b.owner_id = $2
     UNION ALL
     SELECT k.id, k.item_name || ' at ' || k.merchant_name FROM checkout_confirmations k
      WHERE k.id = ANY($1::text[]) AND k.owner_id = $2
     UNION ALL
     SELECT s.id, coalesce(s.instructions->>'item_name', 'schedule') || ' (' || s.cron || ')' FROM task_schedules s
      WHERE s.id = ANY($1::text[]) AND s.owner_id = $2
     UNION ALL
     SELECT d.id, d.event_type || ' delivery' FROM webhook_deliveries d JOIN bots b ON b.id = d.bot_id
      WHERE d.id = ANY($1::text[]) AND b.owner_id = $2`,
    [list, ownerId],
  );
  for (const r of rows) names.set(r.id, r.name);
  return names;
}

function valueWords(key: string, value: unknown): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (key.endsWith('_cents') && typeof value === 'number') return usdText(value);
  if (typeof value === 'boolean') return value ? 'yes' : 'no';
  if (Array.isArray(value)) return value.length ? value.map(String).join(', ') : 'none';
  if (typeof value === 'string') return VALUE_WORDS[value] ?? value;
  if (typeof value === 'number') return String(value);
  return undefined;
}

/**
 * What an audit entry changed, in words: "Per day $30.00 · Approval Ask me for every purchase".
 * Ids of cards, purchases, schedules and deliveries are replaced by their names.
 */
export function auditDetails(details: unknown, names: Map<string, string> = new Map()): SafeHtml {
  if (!details || typeof details !== 'object') return html``;
  const subject: string[] = [];
  const parts: string[] = [];
  for (const [key, value] of Object.entries(details as Record<string, unknown>)) {
    if (value === null || value === undefined || HIDDEN_FIELDS.has(key)) continue;
    if (REFERENCE_FIELDS.has(key)) {
      if (typeof value === 'string') subject.push(names.get(value) ?? 'a removed record');
      continue;
    }
    if (key === 'decoy_reserve_returned_cents' && value === 0) continue;
    const words = valueWords(key, value);
    if (words === undefined) continue;
    const field = key.replace(/_cents$/, '');
    parts.push(`${FIELD_WORDS[field] ?? field.replace(/_/g, ' ')}: ${words}`);
  }
  return html`${subject.length ? html`<span class="subject">${subject.join(', ')}</span>` : ''}${
    parts.length ? html`<span class="why" data-testid="changed">${parts.join(' · ')}</span>` : ''
  }`;
}

export function auditTable(
  entries: Array<{
    action: string;
    details: unknown;
    created_at: string;
    bot_name?: string | null;
    bot_id?: string | null;
  }>,
  options: { showBot?: boolean; names?: Map<string, string> } = {},
): SafeHtml {
  if (entries.length === 0) return html`<p class="muted">Nothing yet.</p>`;
  const columns: Column[] = [
    { label: 'What', key: true },
    ...(options.showBot ? [{ label: 'Bot' }] : []),
    { label: 'When' },
  ];
  return dataTable(
    columns,
    entries.map((e) => ({
      cells: [
        html`<strong>${auditWords(e.action)}</strong> ${auditDetails(e.details, options.names)}`,
        ...(options.showBot
          ? [
              e.bot_name && e.bot_id
                ? html`<a href="/bots/${e.bot_id}">${e.bot_name}</a>`
                : html`<span class="muted">account</span>`,
            ]
          : []),
        when(e.created_at),
      ],
    })),
  );
}
