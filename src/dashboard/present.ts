import { html, type SafeHtml } from './html.ts';
import { when } from './layout.ts';

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
  'schedule.created': 'Created a schedule',
  'schedule.paused': 'Paused a schedule',
  'schedule.resumed': 'Resumed a schedule',
  'schedule.deleted': 'Deleted a schedule',
};

export function auditWords(action: string): string {
  return AUDIT_WORDS[action] ?? action;
}

/** Short, safe rendering of an audit entry's details (amounts in dollars, nothing secret is stored there). */
export function auditDetails(details: unknown): SafeHtml {
  if (!details || typeof details !== 'object') return html``;
  const parts: string[] = [];
  for (const [key, value] of Object.entries(details as Record<string, unknown>)) {
    if (value === null || value === undefined) continue;
    if (key.endsWith('_cents') && typeof value === 'number') {
      parts.push(`${key.replace(/_cents$/, '').replace(/_/g, ' ')}: $${(value / 100).toFixed(2)}`);
    } else if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') {
      parts.push(`${key.replace(/_/g, ' ')}: ${value}`);
    }
  }
  return html`<span class="muted small">${parts.join(' · ')}</span>`;
}

export function auditTable(
  entries: Array<{ action: string; details: unknown; created_at: string; bot_name?: string | null }>,
  options: { showBot?: boolean } = {},
): SafeHtml {
  if (entries.length === 0) return html`<p class="muted">Nothing yet.</p>`;
  return html`<div class="table-wrap"><table>
  <thead><tr><th>When</th>${options.showBot ? html`<th>Bot</th>` : ''}<th>What</th></tr></thead>
  <tbody>${entries.map(
    (e) =>
      html`<tr><td>${when(e.created_at)}</td>${
        options.showBot ? html`<td>${e.bot_name ?? html`<span class="muted">account</span>`}</td>` : ''
      }<td>${auditWords(e.action)} ${auditDetails(e.details)}</td></tr>`,
  )}</tbody></table></div>`;
}
