import type { ApprovalMode, getCard, listOwnerCards, ProfileApprovalRule } from '../../cards/service.ts';
import { humanDigitPositions } from '../../cards/split.ts';
import type { getBot } from '../../owners/bots.ts';
import { html, type SafeHtml } from '../html.ts';
import { botTabs, csrfField, type PageView, pill, postButton, usd, when } from './layout.ts';

// Cards of a bot: the setup wizard, one step at a time (1 name the card → 2 type it in the
// browser, where /assets/card-wizard.js builds the bot's payment profiles file and sends the
// service only three digits per profile → 3 save the file → 4 limits and profiles, shown only
// once the card is active), card guardrails, approval mode, status, and the allowance and approval
// rule of each payment profile.

type OwnerBot = Awaited<ReturnType<typeof getBot>>;

export const MODES: Array<[ApprovalMode, string]> = [
  ['ask_for_everything', 'Ask me for every purchase'],
  ['auto_approve_under_threshold', 'Auto-approve below a threshold'],
  ['auto_approve_by_category', 'Auto-approve chosen categories'],
];
export const RULES: Array<[ProfileApprovalRule, string]> = [
  ['follow_card', 'Follow the card'],
  ['ask_for_everything', 'Ask me for every purchase'],
  ['auto_approve_under_threshold', 'Approve below a threshold'],
];
const WINDOWS = [
  ['day', 'per day'],
  ['week', 'per week'],
  ['month', 'per month'],
] as const;

type Card = Awaited<ReturnType<typeof getCard>>;
type OwnerCard = Awaited<ReturnType<typeof listOwnerCards>>[number];

/** How the owner recognises one of their cards in a list. */
function cardName(c: OwnerCard): string {
  return `${c.label ?? c.card_id} (bot ${c.bot_name})${c.legacy ? ' — added before files were built in your browser' : ''}`;
}

const STEPS = ['Name the card', 'Type the card', 'Save the file', 'Limits and profiles'];

/** The wizard's labelled steps; `current` is 1-based, steps before it are marked done. */
function steps(current: number): SafeHtml {
  return html`<ol class="steps" aria-label="Adding a card">${STEPS.map(
    (label, i) =>
      html`<li${i + 1 === current ? html` aria-current="step"` : i + 1 < current ? html` class="done"` : ''}>${label}</li>`,
  )}</ol>`;
}

function options<T extends string>(list: ReadonlyArray<readonly [T, string]>, current: string): SafeHtml[] {
  return list.map(
    ([value, label]) =>
      html`<option value="${value}"${value === current ? html` selected` : ''}>${label}</option>`,
  );
}

/**
 * Step 2: the card form. Its fields have no name attribute, so the browser never submits them; the
 * wizard script reads them, builds the profiles file and sends only the activation request.
 */
function cardForm(card: Card, botId: string, csrf: string, ownerCards: OwnerCard[]): SafeHtml {
  const field = (id: string, label: string, attrs: SafeHtml | string = '') =>
    html`<div class="field"><label for="${id}">${label}</label><input id="${id}" autocomplete="off" ${attrs}></div>`;
  return html`<p id="wizard-noscript" class="flash bad">This step needs JavaScript: your card number is split in this browser and never sent. Without JavaScript, use <code>botpay card split --bot ${botId} --card ${card.card_id}</code> on your own computer.</p>
<p id="wizard-message" class="flash bad" role="alert" hidden></p>
<p class="small" data-testid="digit-positions">The service keeps digits <strong>${humanDigitPositions(card.missing_digit_positions)}</strong> of your card number (counting the first digit as 1). In the file they show as <code>***</code>; your bot receives them only for a purchase you allow.</p>
<div id="wizard-same-card" class="flash warn stack" role="alert" hidden><p data-testid="same-card-question"></p>
  <p class="row"><button type="button" id="wizard-same" data-same-card="">It is the same card: use its profiles</button> <button type="button" class="secondary" id="wizard-different">It is a different card: activate it</button></p></div>
<form id="card-wizard" class="stack" hidden data-card-id="${card.card_id}" data-bot-id="${botId}" data-real-index="${card.real_profile_index}" data-positions="${card.missing_digit_positions.join(',')}" data-csrf="${csrf}"${ownerCards.length ? html` data-has-cards="yes"` : ''}>
  ${field('card-number', 'Card number', html`inputmode="numeric" maxlength="23" required spellcheck="false"`)}
  <div class="grid two">${field('card-month', 'Expiry month (MM)', html`inputmode="numeric" maxlength="2" required`)}${field('card-year', 'Expiry year (YYYY)', html`inputmode="numeric" maxlength="4" required`)}</div>
  ${field('card-name', 'Name on the card', html`maxlength="100" required`)}
  ${field('addr-line1', 'Billing address', html`maxlength="200" required`)}
  ${field('addr-line2', 'Address line 2 (optional)', html`maxlength="200"`)}
  <div class="grid three">${field('addr-city', 'City', html`maxlength="100" required`)}${field('addr-state', 'State or region (optional)', html`maxlength="100"`)}${field('addr-postal', 'Postal code', html`maxlength="20" required`)}</div>
  ${field('addr-country', 'Country (2 letters)', html`maxlength="2" required`)}
  <button type="submit">Split and activate</button>
</form>
</div>
<div id="wizard-done" class="stack" hidden>${steps(3)}<p class="flash ok">Card activated. Your browser saved <strong>payment-profiles-${card.card_id}.json</strong>: give it to your bot and keep no other copy. The service never had it and cannot give it again.</p>
  <p class="row"><a id="wizard-download" class="button secondary" data-testid="profiles-file">Save the file again</a> <a class="button" href="/bots/${botId}/cards/${card.card_id}?notice=activated">Continue: limits and profiles</a></p></div>
<script src="/assets/card-wizard.js"></script>`;
}

/** The cards of a bot, and step 1 of adding one. */
export function cardsView(data: {
  csrf: string;
  bot: OwnerBot;
  ownerCards: OwnerCard[];
  top: SafeHtml | string;
}): PageView {
  const { bot, csrf } = data;
  const base = `/bots/${bot.bot_id}/cards`;
  const list = bot.cards.length
    ? html`<ul class="bot-list">${bot.cards.map((c) => {
        const card = c as unknown as Card;
        return html`<li class="card bot-item"><div class="spread"><a class="bot-name" href="${base}/${card.card_id}">${card.label ?? card.card_id}</a>${pill(card.status)}</div>
  <dl class="facts"><div><dt>Per purchase</dt><dd>${usd(card.guardrails.per_transaction_usd)}</dd></div>
  <div><dt>Per day</dt><dd>${usd(card.guardrails.daily_usd)}</dd></div>
  <div><dt>Per month</dt><dd>${usd(card.guardrails.monthly_usd)}</dd></div>
  <div><dt>Approval</dt><dd>${MODES.find(([m]) => m === card.approval_mode)?.[1] ?? card.approval_mode}</dd></div></dl></li>`;
      })}</ul>`
    : html`<div class="card empty"><p class="muted">No cards yet. Add one to let the bot pay with your own card, within the limits you set.</p></div>`;
  const body = html`<p class="small"><a href="/">← All bots</a></p>
<h1>${bot.bot_name}: cards</h1>
${botTabs(bot.bot_id, 'cards')}
${data.top}
${list}
<section class="card stack" aria-labelledby="add-h"><h2 id="add-h">Add a card</h2>
  ${steps(1)}
  <p class="muted small">Your card number is never stored whole. We pick 3 digits that only this service keeps (you type them in the next step, they are stored encrypted); your bot gets the rest of the number in a payment profiles file, hidden among 5 decoy profiles, and receives the 3 digits only for a purchase that passes your limits.</p>
  <form method="post" action="${base}" class="inline-form">${csrfField(csrf)}
    <div class="field"><label for="label">Name for this card <span class="hint">Optional, for example "Visa ending 42"</span></label>
      <input id="label" name="label" maxlength="100"></div>
    <button type="submit">Start a card</button></form>
  ${
    data.ownerCards.length
      ? html`<h3>A card you already added</h3>
  <p class="muted small">Adding the same card number to another bot, or again to this one? Choose it here: this bot gets the very same six profiles, and you give it the same file. Two different files of one card would show which profile is real to anyone who gets both.</p>
  <form method="post" action="${base}" class="inline-form" data-testid="same-card-form">${csrfField(csrf)}
    <div class="field"><label for="same_card_as">Same card as</label><select id="same_card_as" name="same_card_as" required><option value="">Choose a card</option>${data.ownerCards.map(
      (c) => html`<option value="${c.card_id}">${cardName(c)}</option>`,
    )}</select></div>
    <div class="field"><label for="same_label">Its name on this bot <span class="hint">Optional</span></label><input id="same_label" name="label" maxlength="100"></div>
    <button type="submit" class="secondary">Add with the same profiles</button></form>`
      : ''
  }</section>`;
  return { title: `${bot.bot_name}: cards`, nav: 'bots', body };
}

/** One card: the wizard while it waits for activation, then its file, limits, status and profiles. */
export function cardView(data: {
  csrf: string;
  bot: OwnerBot;
  card: Card;
  ownerCards: OwnerCard[];
  top: SafeHtml | string;
  /** Typed values to keep after an error (field name → text). */
  values?: Record<string, string | undefined> | undefined;
  /** Which form the values belong to: the profiles form (0), or none (the settings form). */
  profile?: number | undefined;
}): PageView {
  const { bot, card, csrf, values } = data;
  const typed = (name: string, current: string, profile?: number) =>
    (data.profile === profile ? values?.[name] : undefined) ?? current;
  const base = `/bots/${bot.bot_id}/cards/${card.card_id}`;
  // The values the settings form showed (kept from the first showing after an error): a field left
  // as it was changes nothing, even if the setting was changed elsewhere meanwhile.
  const shownFields = (fields: [string, string][]) =>
    fields.map(
      ([name, current]) =>
        html`<input type="hidden" name="shown_${name}" value="${typed(`shown_${name}`, current)}">`,
    );
  const pending = card.status === 'pending_activation';
  const wizard = pending
    ? html`<section class="card stack" aria-labelledby="digits-h"><div id="wizard-step2" class="stack">${steps(2)}<h2 id="digits-h">Type your card: it is split in this browser</h2>
  <p class="small">Type your card as printed. This page builds your bot's payment profiles file here, in your browser: your card and five decoys that look just like it. The service receives only three digits of each profile (stored encrypted), never your number, name or address.</p>
  ${
    card.same_card_as
      ? html`<p class="small">This is the same card as <code>${card.same_card_as}</code>, added before profiles were built in your browser: the hidden digits and the real profile stay the same, and your browser builds new decoys. Delete the old file from every bot: it shows which profile is real (its decoys use test prefixes).</p>`
      : ''
  }
  ${cardForm(card, bot.bot_id, csrf, data.ownerCards)}</section>`
    : card.legacy_profiles_file
      ? html`<section class="card stack" aria-labelledby="file-h"><h2 id="file-h">Payment profiles file</h2>
  <p class="small">This card was added before profiles were built in your browser. Its file: complete profile <strong>${card.real_profile_index}</strong> (the one with <code>#</code>) and give it to your bot. Its decoys use test prefixes, so anyone who reads the file can tell which profile is real: better, ask your bank for a new card number and add that. To keep this number, add it again under "A card you already added" on the cards page: the new file hides the same digits, so the two files together still lack three of them. The missing digits are digits <strong>${humanDigitPositions(card.missing_digit_positions)}</strong> (counting the first digit as 1).</p>
  <p><a class="button" href="${base}/profiles-file" download data-testid="profiles-file">Download payment profiles file</a></p></section>`
      : card.same_card_as
        ? html`<section class="card stack" aria-labelledby="file-h"><h2 id="file-h">Payment profiles file</h2>
  <p class="small" data-testid="shared-profiles">This card shares the six profiles of <code>${card.same_card_as}</code>: give this bot the same payment profiles file. Load that file here and your browser writes this bot's copy (the same profiles, this card's id); nothing is sent.</p>
  <form id="relabel" class="inline-form" data-card-id="${card.card_id}" data-bot-id="${bot.bot_id}"><div class="field"><label for="relabel-file">Profiles file of the same card</label><input id="relabel-file" type="file" accept="application/json,.json"></div></form>
  <p id="relabel-message" class="flash bad" role="alert" hidden></p>
  <p><a id="relabel-download" class="button secondary" hidden data-testid="relabelled-file">Save this bot's copy again</a></p>
<script src="/assets/card-wizard.js"></script></section>`
        : html`<section class="card stack" aria-labelledby="file-h"><h2 id="file-h">Payment profiles file</h2>
  <p class="small">The file was saved by your browser when you activated the card; the service never had it. Lost it? Your bot has a copy. If no copy is left anywhere, replace the card number with your bank: adding the same number again with new decoys would let anyone who ever saw the old file and sees the new one tell which profile is real.</p></section>`;
  // Every profile in one form with one Save (POST …/profiles): p<i>_<field>, with the value shown
  // in p<i>_shown_<field> so a profile left as it was is not written.
  const profileItems = card.profiles.map((p) => {
    const i = p.profile_index;
    const name = (field: string) => `p${i}_${field}`;
    const shownValue = (field: string, current: string) => typed(`p${i}_shown_${field}`, current, 0);
    const value = (field: string, current: string) => typed(name(field), shownValue(field, current), 0);
    const current = {
      allowance_usd: p.allowance_usd.toFixed(2),
      allowance_window: p.allowance_window,
      approval_rule: p.approval_rule,
      approval_threshold_usd: p.approval_threshold_usd.toFixed(2),
      enabled: p.enabled ? 'yes' : 'no',
    };
    return html`<li class="profile-item" data-testid="profile"><div class="spread"><strong>Profile ${i}</strong>${
      i === card.real_profile_index
        ? pill('active', 'your card')
        : html`<span class="muted small">decoy</span>`
    }</div>
  <div class="profile-form">${Object.entries(current).map(
    ([field, v]) => html`<input type="hidden" name="p${i}_shown_${field}" value="${shownValue(field, v)}">`,
  )}
    <div class="field"><label for="al${i}">Allowance, $</label><input id="al${i}" name="${name('allowance_usd')}" type="number" min="0" step="0.01" inputmode="decimal" value="${value('allowance_usd', current.allowance_usd)}"></div>
    <div class="field"><label for="wi${i}">Window</label><select id="wi${i}" name="${name('allowance_window')}">${options(WINDOWS, value('allowance_window', current.allowance_window))}</select></div>
    <div class="field"><label for="ru${i}">Approval</label><select id="ru${i}" name="${name('approval_rule')}">${options(RULES, value('approval_rule', current.approval_rule))}</select></div>
    <div class="field"><label for="th${i}">Threshold, $</label><input id="th${i}" name="${name('approval_threshold_usd')}" type="number" min="0" step="0.01" inputmode="decimal" value="${value('approval_threshold_usd', current.approval_threshold_usd)}"></div>
    <div class="field"><label for="en${i}">Usable</label><select id="en${i}" name="${name('enabled')}">${options(
      [
        ['yes', 'yes'],
        ['no', 'no'],
      ] as const,
      value('enabled', current.enabled),
    )}</select></div></div></li>`;
  });
  const body = html`<p class="small"><a href="/bots/${bot.bot_id}/cards">← Cards of ${bot.bot_name}</a></p>
<div class="spread"><h1>${card.label ?? 'Card'}</h1><span id="card-status" data-testid="card-status">${pill(card.status)}</span></div>
<p class="lead"><code class="small">${card.card_id}</code> · started ${when(card.created_at)}</p>
${botTabs(bot.bot_id, 'cards')}
${data.top}
${wizard}
${
  pending
    ? ''
    : html`<section class="card stack" aria-labelledby="settings-h"><h2 id="settings-h">Limits and approval</h2>
  <form method="post" action="${base}/settings" class="stack" data-limits>${csrfField(csrf)}
    ${shownFields([
      ['per_transaction_usd', card.guardrails.per_transaction_usd.toFixed(2)],
      ['daily_usd', card.guardrails.daily_usd.toFixed(2)],
      ['monthly_usd', card.guardrails.monthly_usd.toFixed(2)],
      ['approval_mode', card.approval_mode],
      ['approval_threshold_usd', card.approval_threshold_usd.toFixed(2)],
      ['approved_categories', card.approved_categories.join(', ')],
    ])}
    <div class="grid three">
      <div class="field"><label for="per_transaction_usd">Per purchase, $</label><input id="per_transaction_usd" name="per_transaction_usd" type="number" min="0" step="0.01" inputmode="decimal" data-limit="per" value="${typed('per_transaction_usd', card.guardrails.per_transaction_usd.toFixed(2))}"></div>
      <div class="field"><label for="daily_usd">Per day, $</label><input id="daily_usd" name="daily_usd" type="number" min="0" step="0.01" inputmode="decimal" data-limit="day" value="${typed('daily_usd', card.guardrails.daily_usd.toFixed(2))}"></div>
      <div class="field"><label for="monthly_usd">Per month, $</label><input id="monthly_usd" name="monthly_usd" type="number" min="0" step="0.01" inputmode="decimal" data-limit="month" value="${typed('monthly_usd', card.guardrails.monthly_usd.toFixed(2))}"></div>
    </div>
    <p class="limit-warning" role="status" hidden></p>
    <div class="field"><label for="approval_mode">Approval</label><select id="approval_mode" name="approval_mode">${options(MODES, typed('approval_mode', card.approval_mode))}</select></div>
    <div class="grid two">
      <div class="field"><label for="approval_threshold_usd">Threshold, $ <span class="hint">Purchases below it are approved automatically (threshold mode)</span></label><input id="approval_threshold_usd" name="approval_threshold_usd" type="number" min="0" step="0.01" inputmode="decimal" value="${typed('approval_threshold_usd', card.approval_threshold_usd.toFixed(2))}"></div>
      <div class="field"><label for="approved_categories">Categories <span class="hint">Comma-separated, approved automatically (category mode)</span></label><input id="approved_categories" name="approved_categories" maxlength="2000" value="${typed('approved_categories', card.approved_categories.join(', '))}"></div>
    </div>
    <button type="submit">Save limits and approval</button></form></section>`
}
${
  pending
    ? ''
    : html`<section class="card stack" aria-labelledby="status-h"><h2 id="status-h">${card.status === 'frozen' ? 'Card is frozen' : 'Freeze the card'}</h2>
  <p class="muted small">${card.status === 'frozen' ? 'No purchase with this card is possible until you unfreeze it.' : 'Stops every purchase with this card at once. The wallet and other cards are not affected.'}</p>
  ${
    card.status === 'frozen'
      ? postButton(`${base}/status`, 'Unfreeze card', csrf, { fields: { status: 'active' } })
      : postButton(`${base}/status`, 'Freeze card', csrf, {
          className: 'danger',
          fields: { status: 'frozen' },
        })
  }</section>`
}
${
  pending
    ? ''
    : html`<section class="card stack" aria-labelledby="profiles-h"><h2 id="profiles-h">Payment profiles</h2>
  <p class="muted small">Each profile has its own allowance and approval rule. Give decoys the same limits as your card so that none stands out.</p>
  <form method="post" action="${base}/profiles" class="stack" data-testid="profiles-form">${csrfField(csrf)}
  <ul class="profile-list">${profileItems}</ul>
  <div><button type="submit">Save profiles</button></div></form></section>`
}`;
  return { title: `${card.label ?? 'Card'} · ${bot.bot_name}`, nav: 'bots', body };
}
