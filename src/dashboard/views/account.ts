import type { findUnclaimedBot, listRecentPairingCodes } from '../../owners/bots.ts';
import type { getMasterGuardrails } from '../../owners/guardrails.ts';
import { html, type SafeHtml } from '../html.ts';
import {
  copyable,
  csrfField,
  dataTable,
  messageView,
  type PageView,
  pill,
  postButton,
  usd,
  when,
} from './layout.ts';

// Account-level pages: claim a bot, pairing codes, master guardrails (the activity page is in
// activity.ts).

type UnclaimedBot = NonNullable<Awaited<ReturnType<typeof findUnclaimedBot>>>;
type PairingCodeRow = Awaited<ReturnType<typeof listRecentPairingCodes>>[number];
type MasterGuardrails = Awaited<ReturnType<typeof getMasterGuardrails>>;

/** Claim without a token: a field to paste it. */
export function claimFormView(csrf: string): PageView {
  return {
    title: 'Claim a bot',
    narrow: true,
    body: html`<div class="card stack"><h1>Claim a bot</h1>
  <p class="lead">Paste the claim token your bot gave you (it starts with <code>svc_claim_</code>), or open the claim link it printed.</p>
  <form method="post" action="/claim">${csrfField(csrf)}
    <div class="field"><label for="claim_token">Claim token</label><input id="claim_token" name="claim_token" type="text" required maxlength="200" autocomplete="off"></div>
    <button type="submit">Claim</button></form></div>`,
  };
}

/** Claim with a valid token: what the bot said about itself, and the button that claims it. */
export function claimConfirmView(csrf: string, token: string, bot: UnclaimedBot): PageView {
  return {
    title: 'Claim a bot',
    narrow: true,
    body: html`<div class="card stack"><h1>Claim “${bot.name}”?</h1>
  <p class="lead">A bot registered itself and named you as its owner. Claiming makes it yours: you fund its wallet and decide what it may spend.</p>
  <dl class="facts"><div><dt>Bot</dt><dd>${bot.name}</dd></div><div><dt>Registered</dt><dd>${when(bot.created_at)}</dd></div>
  <div><dt>Owner e-mail given</dt><dd>${bot.owner_email}</dd></div>${
    bot.description ? html`<div><dt>Description</dt><dd>${bot.description}</dd></div>` : ''
  }</dl>
  <form method="post" action="/claim">${csrfField(csrf)}
    <input type="hidden" name="claim_token" value="${token}">
    <div class="row"><button type="submit">Claim this bot</button><a class="button secondary" href="/">Not now</a></div></form></div>`,
  };
}

export function claimProblemView(signedIn: boolean): PageView {
  return messageView(
    'This claim link is not valid',
    'It was already used, or it was copied incompletely. If your bot is already claimed, you will find it under your bots. Otherwise ask the bot for its claim link again.',
    { signedIn },
  );
}

export function pairingView(data: {
  csrf: string;
  now: number;
  recent: PairingCodeRow[];
  fresh?: SafeHtml | undefined;
}): PageView {
  const rows = data.recent.map((r) => {
    const state = r.used_at ? 'used' : new Date(r.expires_at).getTime() <= data.now ? 'expired' : 'pending';
    return {
      cells: [
        pill(state, state === 'pending' ? 'waiting' : state),
        r.bot_id ? html`<a href="/bots/${r.bot_id}">${r.bot_name}</a>` : html`<span class="muted">—</span>`,
        when(r.created_at),
      ],
    };
  });
  return {
    title: 'Pairing codes',
    nav: 'pairing',
    body: html`<h1>Pairing codes</h1>
<p class="lead">A pairing code links a new bot to you straight away, without a claim link. Tell the bot the 6 digits; it sends them when it registers.</p>
${data.fresh ?? ''}
<div class="card stack"><h2>New code</h2>
  <p class="muted small">A code works once, for one hour. At most 5 codes per hour.</p>
  ${postButton('/pairing', 'Create a pairing code', data.csrf)}</div>
<div class="card"><h2>Recent codes</h2>${
      rows.length
        ? dataTable([{ label: 'State', key: true }, { label: 'Bot', key: true }, { label: 'Created' }], rows)
        : html`<p class="muted">No codes yet.</p>`
    }</div>`,
  };
}

/** The pairing code just created, shown this once. */
export function newPairingCode(code: string, expiresAt: string): SafeHtml {
  return html`<div class="flash ok stack" role="status"><div>Your pairing code (shown once, valid until ${when(expiresAt)}):</div>
  ${copyable(code, { testid: 'pairing-code', big: true })}
  <div class="small">Give it to your bot: it registers with <code>"pairing_code": "${code}"</code>.</div></div>`;
}

export function guardrailsView(data: {
  csrf: string;
  guardrails: MasterGuardrails;
  top: SafeHtml | string;
  values: Record<string, string | undefined>;
}): PageView {
  const g = data.guardrails;
  return {
    title: 'Guardrails',
    nav: 'guardrails',
    body: html`<h1>Master guardrails</h1>
<p class="lead">Hard limits on real-money spending across all your bots. Every purchase must fit them, whatever a bot's own limits say.</p>
${data.top}
<div class="card"><dl class="facts">
  <div><dt>Per purchase</dt><dd data-testid="per-transaction">${usd(g.per_transaction_usd)}</dd></div>
  <div><dt>Per day</dt><dd>${usd(g.daily_budget_usd)}</dd></div>
  <div><dt>Per month</dt><dd>${usd(g.monthly_budget_usd)}</dd></div>
  <div><dt>Spent today / this month</dt><dd>${usd(g.daily_spent_usd)} / ${usd(g.monthly_spent_usd)}</dd></div>
</dl></div>
<div class="card"><h2>Change</h2><p class="muted small">Change the amounts you want to change. A field left as it is, or emptied, keeps its amount.</p>${guardrailsForm(
      data.csrf,
      undefined,
      data.values,
      { per: g.per_transaction_usd, day: g.daily_budget_usd, month: g.monthly_budget_usd },
    )}</div>`,
  };
}

/** The master guardrails form (on the guardrails page, and on a bot page with return_to = the bot). */
export function guardrailsForm(
  csrf: string,
  returnTo?: string,
  values: Record<string, string | undefined> = {},
  current?: { per: number; day: number; month: number },
): SafeHtml {
  // Each field shows the current amount; shown_<name> keeps the amount the page showed, so a field
  // left as it is changes nothing even if the amount was changed elsewhere meanwhile.
  const field = (name: string, label: string, hint: string, limit: 'per' | 'day' | 'month', max: number) => {
    const shown = values[`shown_${name}`] ?? (current ? current[limit].toFixed(2) : '');
    return html`<div class="field"><label for="${name}">${label}<span class="hint">${hint}</span></label>
      <input id="${name}" name="${name}" type="number" min="0" max="${max}" step="0.01" inputmode="decimal" data-limit="${limit}"${
        current ? html` data-current="${current[limit]}"` : ''
      } value="${values[name] ?? shown}"><input type="hidden" name="shown_${name}" value="${shown}"></div>`;
  };
  return html`<form method="post" action="/guardrails" class="stack" data-limits>${csrfField(csrf)}
  ${returnTo ? html`<input type="hidden" name="return_to" value="${returnTo}">` : ''}
  <div class="grid three">
    ${field('per_transaction_usd', 'Per purchase, $', 'Largest single real purchase', 'per', 1_000_000)}
    ${field('daily_budget_usd', 'Per day, $', 'All bots together, UTC day', 'day', 1_000_000)}
    ${field('monthly_budget_usd', 'Per month, $', 'All bots together, UTC month', 'month', 10_000_000)}
  </div>
  <p class="limit-warning" role="status" hidden></p>
  <div><button type="submit">Save guardrails</button></div></form>`;
}
