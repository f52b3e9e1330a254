import type { AuditAction } from '../../owners/audit.ts';
import { centsToMicros, microsToUsd } from '../../platform/money.ts';
import { html, type SafeHtml } from '../html.ts';
import { type Column, dataTable, type PageView, when } from './layout.ts';

// The owner's audit log in words: the account's Activity page and the bot page's audit log.
// AUDIT_ACTION_WORDS is the one table of what each audit action is called; an action missing
// from it is shown as its code.

/** Approval modes of a card in words (card pages and the bot page's cards table). */
export const APPROVAL_WORDS: Record<string, string> = {
  ask_for_everything: 'Ask me for every purchase',
  auto_approve_under_threshold: 'Auto-approve below a threshold',
  auto_approve_by_category: 'Auto-approve chosen categories',
  follow_card: 'Follow the card',
};

/** Every audit action (audit_log.action) in words: one for each AuditAction (test/dashboard/auditWords.test.ts). */
export const AUDIT_ACTION_WORDS: Record<AuditAction, string> = {
  'bot.claimed': 'Claimed the bot',
  'bot.paired': 'Paired the bot with a pairing code',
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
  'owner.token_created': 'Created an owner API token',
  'owner.token_revoked': 'Revoked an owner API token',
  'card.started': 'Started a card',
  'card.activated': 'Activated a card',
  'card.updated': 'Changed card settings',
  'card.profile_updated': 'Changed a payment profile',
  'purchase.approved': 'Approved a purchase',
  'purchase.denied': 'Denied a purchase',
  'topup.approved': 'Approved a top-up request',
  'topup.declined': 'Declined a top-up request',
  'webhook_delivery.retried': 'Retried a webhook delivery',
  'tunnel_token.rotated': 'Rotated the tunnel token',
  'tunnel.forward_changed': 'Changed what the tunnel forwards',
  'schedule.created': 'Created a schedule',
  'schedule.paused': 'Paused a schedule',
  'schedule.resumed': 'Resumed a schedule',
  'schedule.deleted': 'Deleted a schedule',
};

export function auditWords(action: string): string {
  return Object.hasOwn(AUDIT_ACTION_WORDS, action) ? AUDIT_ACTION_WORDS[action as AuditAction] : action;
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
 * Ids of the records (cards, purchases, schedules, webhook deliveries) that audit entries refer
 * to; their names are looked up for the owner by `auditRecordNames` (src/owners/service.ts).
 */
export function auditReferences(entries: ReadonlyArray<{ details: unknown }>): string[] {
  const ids = new Set<string>();
  for (const e of entries) {
    if (!e.details || typeof e.details !== 'object') continue;
    for (const [key, value] of Object.entries(e.details as Record<string, unknown>)) {
      if (REFERENCE_FIELDS.has(key) && typeof value === 'string') ids.add(value);
    }
  }
  return [...ids];
}

// Amounts in audit details: `…_cents` (whole cents, as the owner typed them, and entries written
// before migration 0050) or `…_micros` (amounts the service moved).
// With thousands separators ("$1,025.50"), unlike money.ts usdText: these are read, not parsed.
function auditUsd(micros: number): string {
  return `$${microsToUsd(micros).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 })}`;
}

function valueWords(key: string, value: unknown): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (key.endsWith('_cents') && typeof value === 'number') return auditUsd(centsToMicros(value));
  if (key.endsWith('_micros') && typeof value === 'number') return auditUsd(value);
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
    if ((key === 'decoy_reserve_returned_cents' || key === 'decoy_reserve_returned_micros') && value === 0)
      continue;
    const words = valueWords(key, value);
    if (words === undefined) continue;
    const field = key.replace(/_(cents|micros)$/, '');
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

export interface ActivityEntry {
  action: string;
  details: unknown;
  created_at: string;
  bot_name: string | null;
  bot_id: string | null;
}

/** The account's Activity page. */
export function activityView(entries: ActivityEntry[], names: Map<string, string>): PageView {
  return {
    title: 'Activity',
    nav: 'activity',
    body: html`<h1>Activity</h1><p class="lead">Everything done in your account, newest first.</p>
<div class="card">${auditTable(entries, { showBot: true, names })}</div>`,
  };
}
