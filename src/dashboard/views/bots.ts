import type { listAudit } from '../../owners/audit.ts';
import type { getBot, listBots } from '../../owners/bots.ts';
import type { listMoneyMovements } from '../../owners/funding.ts';
import type { getMasterGuardrails } from '../../owners/guardrails.ts';
import { microsToUsd } from '../../platform/money.ts';
import { html, type SafeHtml } from '../html.ts';
import { guardrailsForm } from './account.ts';
import { APPROVAL_WORDS, auditTable } from './activity.ts';
import {
  botTabs,
  copyable,
  csrfField,
  dataTable,
  type PageView,
  pill,
  postButton,
  usd,
  when,
} from './layout.ts';

// The overview of the owner's bots and the page of one bot with its actions (fund, freeze, rails,
// guardrails, key rotations), its money movements and its audit log.

type BotSummary = Awaited<ReturnType<typeof listBots>>['bots'][number];
type OwnerBot = Awaited<ReturnType<typeof getBot>>;
type MoneyMovement = Awaited<ReturnType<typeof listMoneyMovements>>[number];
type AuditEntry = Awaited<ReturnType<typeof listAudit>>['entries'][number];
type MasterGuardrails = Awaited<ReturnType<typeof getMasterGuardrails>>;

/** How many money movements the bot page shows at a time. */
export const MOVEMENTS_PAGE = 25;

// A purchase you approve is two movements: the hold takes the amount from the available balance
// (counted there, once), the capture pays it from the hold (the available balance does not change).
// The words say which is which, so the list never reads as the same purchase paid twice.
const TX_WORDS: Record<string, string> = {
  funding: 'Added funds',
  purchase: 'Bought',
  hold: 'Held for your approval',
  capture: 'Approved: paid from the hold',
  release: 'Hold released: back in the wallet',
};

/** The Amount column: the change of the available balance, or what happened to held money. */
function txAmount(t: MoneyMovement): SafeHtml | string {
  const available = t.available_micros;
  if (t.kind === 'hold') {
    return html`${usd(microsToUsd(available))} <span class="small muted" data-testid="tx-state">held</span>`;
  }
  if (available !== 0) return `${available > 0 ? '+' : ''}${usd(microsToUsd(available))}`;
  const amount = usd(microsToUsd(Math.abs(t.held_micros)));
  return t.kind === 'capture'
    ? html`<span class="small muted" data-testid="tx-state">${amount} paid from the hold</span>`
    : html`<span class="small muted">${amount} from the hold</span>`;
}

function txWhat(t: MoneyMovement): SafeHtml {
  const words = TX_WORDS[t.kind] ?? t.description ?? t.kind.replace(/_/g, ' ');
  if (!t.item_name) return html`${words}`;
  return html`<strong>${t.item_name}</strong> <span class="muted">at ${t.merchant_name ?? ''}</span><br><span class="small muted">${words}</span>`;
}

/** A rotated key or secret, shown this once. */
export function shownOnce(title: string, value: string, note: string): SafeHtml {
  return html`<div class="flash info stack" role="status"><strong>${title}</strong>
  ${copyable(value, { testid: 'secret-value' })}
  <span class="small">${note} It is shown only now: copy it before you leave this page. Reloading the page does not show it again.</span></div>`;
}

/** What the dashboard says of a tunnel bot (and its deliveries) before its tunnel client first connected. */
export const WAITING_FOR_TUNNEL_TEXT = "waiting for the bot's tunnel client — run the command it was given";

function webhookHealth(webhook: {
  status: string;
  fail_count: number;
  waiting_for_tunnel: boolean;
}): SafeHtml {
  // Calm: a new tunnel bot is waiting for its client, not failing (src/webhooks/tunnelWait.ts).
  if (webhook.waiting_for_tunnel && webhook.status === 'pending') {
    return html`<span data-testid="webhook-waiting">${pill('pending', 'waiting for tunnel')}<br><span class="small muted">${WAITING_FOR_TUNNEL_TEXT}</span></span>`;
  }
  const label =
    webhook.status === 'active'
      ? 'healthy'
      : webhook.status === 'pending'
        ? 'not yet delivered'
        : `${webhook.status} (${webhook.fail_count} failed)`;
  return pill(webhook.status, label);
}

export function botsOverviewView(bots: BotSummary[]): PageView {
  const pending = bots.reduce((n, b) => n + b.pending_approvals, 0);
  // Top-up requests wait for the owner too (the Approvals page lists both): the line says so, so
  // it never reads "Nothing is waiting" beside a top-up badge.
  const topups = bots.reduce((n, b) => n + b.pending_topups, 0);
  const waiting = [
    ...(pending > 0 ? [`${pending} purchase${pending === 1 ? '' : 's'}`] : []),
    ...(topups > 0 ? [`${topups} top-up request${topups === 1 ? '' : 's'}`] : []),
  ];
  const list = bots.length
    ? html`<ul class="bot-list">${bots.map(
        (b) => html`<li class="card bot-item">
  <div class="spread"><a class="bot-name" href="/bots/${b.bot_id}">${b.bot_name}</a>${pill(b.wallet.status === 'frozen' ? 'frozen' : b.status)}</div>
  ${b.description ? html`<div class="muted small">${b.description}</div>` : ''}
  <dl class="facts">
    <div><dt>Balance</dt><dd>${usd(b.wallet.balance_usd)}</dd></div>
    <div><dt>On hold</dt><dd>${usd(b.wallet.held_usd)}</dd></div>
    <div><dt>Webhook</dt><dd>${webhookHealth(b.webhook)}</dd></div>
    <div><dt>Waiting for you</dt><dd>${b.pending_approvals > 0 ? html`<a href="/approvals">${pill('pending', `${b.pending_approvals} approval${b.pending_approvals === 1 ? '' : 's'}`)}</a>` : ''}${b.pending_topups > 0 ? html` <a href="/approvals">${pill('pending', `${b.pending_topups} top-up request${b.pending_topups === 1 ? '' : 's'}`)}</a>` : ''}${b.pending_approvals + b.pending_topups === 0 ? html`<span class="muted">nothing</span>` : ''}</dd></div>
  </dl></li>`,
      )}</ul>`
    : html`<div class="card empty stack"><h2>No bots yet</h2>
  <p class="muted">When a bot registers with your e-mail address, it gives you a claim link. Or create a pairing code and tell it to your bot.</p>
  <div class="row centered"><a class="button" href="/pairing">Create a pairing code</a><a class="button secondary" href="/claim">I have a claim link</a></div></div>`;
  return {
    title: 'Your bots',
    nav: 'bots',
    body: html`<div class="spread"><h1>Your bots</h1>${bots.length ? html`<div class="row"><a class="button secondary" href="/claim">Claim a bot</a></div>` : ''}</div>
<p class="lead">${
      bots.length
        ? waiting.length > 0
          ? html`<a href="/approvals" data-testid="waiting-link">${waiting.join(' and ')} waiting for your decision →</a>`
          : 'Nothing is waiting for you.'
        : 'Bots you own appear here.'
    }</p>${list}`,
  };
}

export function botView(data: {
  csrf: string;
  bot: OwnerBot;
  guardrails: MasterGuardrails;
  transactions: MoneyMovement[];
  entries: AuditEntry[];
  names: Map<string, string>;
  partnerSection: SafeHtml;
  top: SafeHtml | string;
  /** Typed values to keep after an error (form field name → text). */
  values: Record<string, string | undefined>;
  /** The funding form's idempotency key (a double submit funds once). */
  fundKey: string;
}): PageView {
  const { bot, guardrails, transactions, values, csrf } = data;
  const base = `/bots/${bot.bot_id}`;
  const frozen = bot.wallet.status === 'frozen';
  const rail = (key: 'card_wallet' | 'partner_wallet') => bot.rails.find((r) => r.rail === key);
  const lastTx = transactions.at(-1);
  const body = html`
<p class="small"><a href="/">← All bots</a></p>
<div class="spread"><h1>${bot.bot_name}</h1>${pill(frozen ? 'frozen' : bot.status)}</div>
<p class="lead">${bot.description ?? ''} <code class="small">${bot.bot_id}</code></p>
${botTabs(bot.bot_id, 'overview')}
${data.top}
<div class="card"><dl class="facts">
  <div><dt>Balance</dt><dd class="big" data-testid="balance">${usd(bot.wallet.balance_usd)}</dd></div>
  <div><dt>On hold</dt><dd>${usd(bot.wallet.held_usd)}</dd></div>
  <div><dt>Wallet</dt><dd data-testid="wallet-status">${pill(bot.wallet.status)}</dd></div>
  <div><dt>Webhook</dt><dd>${webhookHealth(bot.webhook)}</dd></div>
</dl>
${
  bot.wallet.decoy_reserve_usd > 0
    ? html`<p class="muted small" data-testid="decoy-reserve">The bot can spend ${usd(bot.wallet.bot_visible_balance_usd)}: decoy purchases keep ${usd(bot.wallet.decoy_reserve_usd)} of your balance from it, so that it cannot tell them from real ones. ${usd(bot.wallet.decoy_reserve_returnable_usd)} of that comes back with your next funding; the rest as your card's real profile spends as much as its busiest decoy.</p>`
    : ''
}
<p class="muted small">Webhooks go to ${
    bot.webhook.callback_url
      ? html`<code>${bot.webhook.callback_url}</code>`
      : html`the managed tunnel <code>${bot.webhook.tunnel_hostname ?? ''}</code>`
  }. ${bot.pending_approvals > 0 ? html`<a href="/approvals">${bot.pending_approvals} purchase${bot.pending_approvals === 1 ? ' is' : 's are'} waiting for your approval →</a>` : ''}</p></div>

<div class="grid two">
<section class="card stack" aria-labelledby="fund-h"><h2 id="fund-h">Add funds</h2>
  <form method="post" action="${base}/fund" class="inline-form">${csrfField(csrf)}<input type="hidden" name="idempotency_key" value="${data.fundKey}">
    <div class="field"><label for="amount_usd">Amount, $<span class="hint">Up to $10,000 at a time</span></label>
      <input id="amount_usd" name="amount_usd" type="number" min="0.01" max="10000" step="0.01" inputmode="decimal" required placeholder="25.00" value="${values.amount_usd ?? ''}"${values.amount_usd !== undefined ? html` aria-invalid="true"` : ''}></div>
    <button type="submit">Add funds</button></form></section>

<section class="card stack" aria-labelledby="freeze-h"><h2 id="freeze-h">${frozen ? 'Wallet is frozen' : 'Freeze the wallet'}</h2>
  <p class="muted small">${
    frozen
      ? 'The bot cannot spend anything until you unfreeze it.'
      : 'Stops all spending at once, for example if the bot behaves oddly. You can unfreeze any time.'
  }</p>
  ${
    frozen
      ? postButton(`${base}/unfreeze`, 'Unfreeze wallet', csrf)
      : postButton(`${base}/freeze`, 'Freeze wallet', csrf, { className: 'danger' })
  }</section>
</div>

<section class="card stack" aria-labelledby="rails-h"><h2 id="rails-h">Payment rails</h2>
  <div class="spread"><div><strong>Card wallet</strong> ${pill(rail('card_wallet')?.status ?? 'inactive')}
    <div class="muted small">Purchases with your self-hosted cards.</div></div>
    ${postButton(
      `${base}/rails/card_wallet`,
      rail('card_wallet')?.status === 'active' ? 'Turn off' : 'Turn on',
      csrf,
      {
        className: 'secondary',
        fields: { status: rail('card_wallet')?.status === 'active' ? 'inactive' : 'active' },
      },
    )}</div>
  ${data.partnerSection}
</section>

<section class="card stack" aria-labelledby="cards-h"><div class="spread"><h2 id="cards-h">Cards</h2><a href="${base}/cards">${bot.cards.length ? 'Manage cards' : 'Add a card'} →</a></div>${
    bot.cards.length
      ? dataTable(
          [
            { label: 'Card', key: true },
            { label: 'Status', key: true },
            { label: 'Per purchase', num: true },
            { label: 'Day', num: true },
            { label: 'Month', num: true },
            { label: 'Approval' },
          ],
          bot.cards.map((c) => ({
            cells: [
              html`<a href="${base}/cards/${String(c.card_id)}">${String(c.label ?? c.card_id)}</a>`,
              pill(String(c.status)),
              usd(c.guardrails.per_transaction_usd),
              usd(c.guardrails.daily_usd),
              usd(c.guardrails.monthly_usd),
              APPROVAL_WORDS[String(c.approval_mode)] ?? String(c.approval_mode).replace(/_/g, ' '),
            ],
          })),
        )
      : html`<p class="muted">No cards yet.</p>`
  }</section>

<section class="card stack" aria-labelledby="guard-h"><h2 id="guard-h">Master guardrails</h2>
  <p class="muted small">These limits apply to all your bots together.</p>
  <dl class="facts"><div><dt>Per purchase</dt><dd>${usd(guardrails.per_transaction_usd)}</dd></div>
    <div><dt>Per day</dt><dd>${usd(guardrails.daily_budget_usd)}</dd></div>
    <div><dt>Per month</dt><dd>${usd(guardrails.monthly_budget_usd)}</dd></div>
    <div><dt>Spent today</dt><dd>${usd(guardrails.daily_spent_usd)}</dd></div></dl>
  <details><summary>Change master guardrails</summary>${guardrailsForm(
    csrf,
    bot.bot_id,
    {},
    {
      per: guardrails.per_transaction_usd,
      day: guardrails.daily_budget_usd,
      month: guardrails.monthly_budget_usd,
    },
  )}</details></section>

<section class="card stack" aria-labelledby="keys-h"><h2 id="keys-h">Keys</h2>
  <details><summary>Rotate the API key…</summary>
    <p class="small">The bot's current key stops working immediately. You will see the new key once; give it to your bot.</p>
    ${postButton(`${base}/api-key/rotate`, 'Rotate API key now', csrf, { className: 'danger' })}</details>
  <details><summary>Rotate the webhook secret…</summary>
    <p class="small">New deliveries are signed with the new secret. You will see it once; give it to your bot.</p>
    ${postButton(`${base}/webhook-secret/rotate`, 'Rotate webhook secret now', csrf, { className: 'danger' })}</details>
</section>

<section class="card" aria-labelledby="tx-h"><h2 id="tx-h">Transactions</h2>${
    transactions.length
      ? html`${dataTable(
          [
            { label: 'What', key: true },
            { label: 'Amount', num: true, key: true },
            { label: 'Balance after', num: true },
            { label: 'Held change', num: true },
            { label: 'When' },
          ],
          transactions.map((t) => {
            const held = t.held_micros;
            return {
              attrs: { 'data-testid': 'transaction', 'data-kind': t.kind },
              cells: [
                txWhat(t),
                txAmount(t),
                html`<span data-testid="balance-after">${usd(microsToUsd(t.balance_after_micros))}</span>`,
                held ? `${held > 0 ? '+' : ''}${usd(microsToUsd(held))}` : '',
                when(t.created_at),
              ],
            };
          }),
        )}${
          transactions.length === MOVEMENTS_PAGE && lastTx
            ? html`<p><a href="${base}?before=${encodeURIComponent(lastTx.created_at)}#tx-h">Older transactions →</a></p>`
            : ''
        }`
      : html`<p class="muted">No money has moved yet.</p>`
  }</section>

<section class="card" aria-labelledby="audit-h"><h2 id="audit-h">Audit log</h2>${auditTable(data.entries, { names: data.names })}</section>`;
  return { title: bot.bot_name, nav: 'bots', body };
}
