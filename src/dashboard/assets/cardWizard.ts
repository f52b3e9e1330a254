// The card wizard's script (served as /assets/card-wizard.js, bundled with src/cards/split.ts).
// It runs in the owner's browser: it reads the card number, expiry, name and address from a form
// whose fields have no name (the browser never submits them), builds the bot's payment profiles
// file and the activation request with buildSplit, sends only the activation request (three digits
// per profile) to the owner API with the session's CSRF token, and offers the file as a download.
// When the service answers that the card resembles one already added (409 possible_same_card), it
// asks: the same card takes that card's profiles (POST …/same-card, and the file just built is
// dropped), a different one is activated with different_card. On the page of a card that shares
// another's profiles, it rewrites that card's file for this bot (the same profiles, this card's
// id), in the browser.

import {
  buildSplit,
  type CardStart,
  checkCardholderInput,
  PROFILE_COUNT,
  PROFILES_FORMAT,
  type ProfilesFile,
} from '../../cards/split.ts';

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
      const res = await post(`/api/v1/owner/bots/${card.bot_id}/cards/${card.card_id}/activate`, activation);
      const body = (await res.json().catch(() => ({}))) as {
        error?: string;
        message?: string;
        card_id?: string;
        bot_name?: string;
        label?: string | null;
      };
      if (res.status === 409 && body.error === 'possible_same_card' && body.card_id) {
        const name = body.label ? `"${body.label}" (${body.card_id})` : body.card_id;
        const question = `This looks like card ${name} on bot ${body.bot_name ?? ''}: the same length and expiry. Is it the same card number? Then this card takes its six profiles and your bot gets the same file; two different files of one card would show which profile is real. Nothing was activated yet.`;
        askSameCard(question, body.card_id, async () => {
          const again = await post(`/api/v1/owner/bots/${card.bot_id}/cards/${card.card_id}/activate`, {
            ...activation,
            different_card: true,
          });
          if (!again.ok) {
            const b = (await again.json().catch(() => ({}))) as { message?: string };
            show(message, b.message ?? `The service answered ${again.status}.`, 'bad');
            return;
          }
          finish();
        });
        return;
      }
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
    finish();

    function finish(): void {
      // The number leaves the page only inside this file, which the owner saves for the bot.
      form.querySelectorAll<HTMLInputElement>('input').forEach((el) => {
        el.value = '';
      });
      form.hidden = true;
      document.getElementById('wizard-same-card')?.setAttribute('hidden', '');
      // One step at a time: the typing step gives way to the saving step.
      document.getElementById('wizard-step2')?.setAttribute('hidden', '');
      offer(file, `payment-profiles-${card.card_id}.json`, 'wizard-download');
      if (message) message.hidden = true;
      if (done) done.hidden = false;
      // The page's badge said "pending activation": it says what the service now holds.
      const badge = document.querySelector('#card-status .pill');
      if (badge) {
        badge.className = 'pill ok';
        badge.textContent = 'active';
      }
    }
  });

  /** The question after 409 possible_same_card: take that card's profiles, or activate as a different card. */
  function askSameCard(text: string, otherId: string, different: () => Promise<void>): void {
    const box = document.getElementById('wizard-same-card');
    const question = box?.querySelector('p');
    if (!box || !question) return;
    question.textContent = text;
    box.hidden = false;
    const same = document.getElementById('wizard-same') as HTMLButtonElement | null;
    const other = document.getElementById('wizard-different') as HTMLButtonElement | null;
    if (same) {
      same.onclick = async () => {
        same.disabled = true;
        const res = await post(`/api/v1/owner/bots/${card.bot_id}/cards/${card.card_id}/same-card`, {
          same_card_as: otherId,
        }).catch(() => null);
        same.disabled = false;
        if (!res?.ok) {
          const b = res ? ((await res.json().catch(() => ({}))) as { message?: string }) : {};
          show(message, b.message ?? 'The service could not be reached; try again.', 'bad');
          return;
        }
        // The file built here is dropped: this bot gets the other card's file.
        form.querySelectorAll<HTMLInputElement>('input').forEach((el) => {
          el.value = '';
        });
        window.location.assign(`/bots/${card.bot_id}/cards/${card.card_id}?notice=shared`);
      };
    }
    if (other) {
      other.onclick = async () => {
        other.disabled = true;
        await different().finally(() => {
          other.disabled = false;
        });
      };
    }
  }

  function post(url: string, body: unknown): Promise<Response> {
    return fetch(url, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json', 'x-csrf-token': d.csrf ?? '' },
      body: JSON.stringify(body),
    });
  }
}

/** Offers a JSON file as a download through the link with this id (clicked once). */
function offer(file: unknown, name: string, linkId: string): void {
  const blob = new Blob([`${JSON.stringify(file, null, 2)}\n`], { type: 'application/json' });
  const link = document.getElementById(linkId) as HTMLAnchorElement | null;
  if (link) {
    link.href = URL.createObjectURL(blob);
    link.download = name;
    link.hidden = false;
    link.click();
  }
}

/**
 * A card that shares another's profiles: the owner loads that card's file and the browser writes
 * this bot's copy (format 2 only; the same six profiles with this card's and bot's ids).
 */
function relabel(form: HTMLFormElement): void {
  const input = form.querySelector<HTMLInputElement>('#relabel-file');
  const message = document.getElementById('relabel-message');
  input?.addEventListener('change', async () => {
    const chosen = input.files?.[0];
    if (!chosen) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(await chosen.text());
    } catch {
      show(message, 'That file is not a payment profiles file (not JSON).', 'bad');
      return;
    }
    const f = parsed as Partial<ProfilesFile>;
    if (f.format !== PROFILES_FORMAT || !Array.isArray(f.profiles) || f.profiles.length !== PROFILE_COUNT) {
      show(
        message,
        'That file is not a payment profiles file built by the card wizard or botpay card split.',
        'bad',
      );
      return;
    }
    const copy = { ...f, card_id: form.dataset.cardId ?? '', bot_id: form.dataset.botId ?? '' };
    input.value = '';
    if (message) message.hidden = true;
    offer(copy, `payment-profiles-${copy.card_id}.json`, 'relabel-download');
  });
}

const form = document.getElementById('card-wizard') as HTMLFormElement | null;
if (form) start(form);
const relabelForm = document.getElementById('relabel') as HTMLFormElement | null;
if (relabelForm) relabel(relabelForm);
