// The card wizard's script (served as /assets/card-wizard.js, bundled with src/cards/split.ts).
// It runs in the owner's browser: it reads the card number, expiry, name and address from a form
// whose fields have no name (the browser never submits them), builds the bot's payment profiles
// file and the activation request with buildSplit, sends only the activation request (three digits
// per profile) to the owner API with the session's CSRF token, and offers the file as a download.

import { buildSplit, type CardStart, checkCardholderInput } from '../../cards/split.ts';

function value(form: HTMLFormElement, id: string): string {
  return (form.querySelector<HTMLInputElement>(`#${id}`)?.value ?? '').trim();
}

function show(el: HTMLElement | null, text: string, kind: 'bad' | 'ok'): void {
  if (!el) return;
  el.textContent = text;
  el.className = `flash ${kind}`;
  el.hidden = false;
}

function start(form: HTMLFormElement): void {
  const d = form.dataset;
  const card: CardStart = {
    card_id: d.cardId ?? '',
    bot_id: d.botId ?? '',
    real_profile_index: Number(d.realIndex),
    missing_digit_positions: (d.positions ?? '').split(',').map(Number),
  };
  const message = document.getElementById('wizard-message');
  const done = document.getElementById('wizard-done');
  form.hidden = false;
  document.getElementById('wizard-noscript')?.setAttribute('hidden', '');
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const input = {
      number: value(form, 'card-number'),
      expiry_month: value(form, 'card-month'),
      expiry_year: value(form, 'card-year').replace(/^(\d{2})$/, '20$1'),
      cardholder_name: value(form, 'card-name'),
      billing_address: {
        line1: value(form, 'addr-line1'),
        line2: value(form, 'addr-line2'),
        city: value(form, 'addr-city'),
        state: value(form, 'addr-state'),
        postal_code: value(form, 'addr-postal'),
        country: value(form, 'addr-country'),
      },
    };
    const problem = checkCardholderInput(input, card, new Date());
    if (problem) {
      show(message, problem, 'bad');
      return;
    }
    const { file, activation } = buildSplit(input, card, new Date());
    const button = form.querySelector<HTMLButtonElement>('button[type="submit"]');
    if (button) button.disabled = true;
    try {
      const res = await fetch(`/api/v1/owner/bots/${card.bot_id}/cards/${card.card_id}/activate`, {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'content-type': 'application/json', 'x-csrf-token': d.csrf ?? '' },
        body: JSON.stringify(activation),
      });
      const body = (await res.json().catch(() => ({}))) as { message?: string };
      if (!res.ok) {
        show(message, body.message ?? `The service answered ${res.status}.`, 'bad');
        return;
      }
    } catch {
      show(message, 'The service could not be reached. Nothing was activated; try again.', 'bad');
      return;
    } finally {
      if (button) button.disabled = false;
    }
    // The number leaves the page only inside this file, which the owner saves for the bot.
    form.querySelectorAll<HTMLInputElement>('input').forEach((el) => {
      el.value = '';
    });
    form.hidden = true;
    // One step at a time: the typing step gives way to the saving step.
    document.getElementById('wizard-step2')?.setAttribute('hidden', '');
    const blob = new Blob([`${JSON.stringify(file, null, 2)}\n`], { type: 'application/json' });
    const link = document.getElementById('wizard-download') as HTMLAnchorElement | null;
    if (link) {
      link.href = URL.createObjectURL(blob);
      link.download = `payment-profiles-${card.card_id}.json`;
      link.click();
    }
    if (message) message.hidden = true;
    if (done) done.hidden = false;
  });
}

const form = document.getElementById('card-wizard') as HTMLFormElement | null;
if (form) start(form);
