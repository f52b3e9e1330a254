import type { listApprovals } from '../../checkout/decisions.ts';
import type { listRecentDecisions, OneClickTarget } from '../../checkout/inbox.ts';
import { microsToUsd } from '../../platform/money.ts';
import { present } from '../../platform/present.ts';
import type { listOwnerTopups } from '../../topups/service.ts';
import { html, type SafeHtml } from '../html.ts';
import {
  csrfField,
  dataTable,
  messageBody,
  messageView,
  type PageView,
  pill,
  postButton,
  usd,
  when,
} from './layout.ts';

// The approvals inbox (held purchases of all the owner's bots with a countdown to expiry, open
// top-up requests, recently decided purchases and top-up requests) and the one-click approve/deny pages reached from
// the e-mail.

type PendingApproval = Awaited<ReturnType<typeof listApprovals>>['approvals'][number];
type DecidedPurchase = Awaited<ReturnType<typeof listRecentDecisions>>[number];
type OpenTopup = Awaited<ReturnType<typeof listOwnerTopups>>['topup_requests'][number];

const DECIDED_BY: Record<string, string> = {
  owner: 'by you',
  system: 'automatically',
  expiry: 'time ran out',
};

export const OUTCOME_WORDS: Record<string, string> = {
  approved: 'Approved',
  denied: 'Denied',
  expired: 'Expired (not decided in time)',
  declined: 'Declined',
};

/** "3 minutes", "under a minute": the span of a burst in words. */
function minutesBetween(first: string, last: string): string {
  const minutes = Math.round((new Date(last).getTime() - new Date(first).getTime()) / 60_000);
  return minutes < 1 ? 'under a minute' : `${minutes} minute${minutes === 1 ? '' : 's'}`;
}

/** Seconds from `now` until `isoTime`, never negative (the countdown's data-left). */
function secondsLeft(isoTime: string, now: number): number {
  return Math.max(0, Math.round((new Date(isoTime).getTime() - now) / 1000));
}

type Burst = Awaited<ReturnType<typeof listApprovals>>['bursts'][number];

export function inboxView(data: {
  csrf: string;
  now: number;
  approvals: PendingApproval[];
  bursts: Burst[];
  decided: DecidedPurchase[];
  topups: OpenTopup[];
  /** The longest note a decline may carry (topups/service.ts NOTE_MAX). */
  noteMax: number;
  top: SafeHtml | string;
}): PageView {
  const { approvals, decided, csrf, now } = data;
  const pending = approvals.length
    ? html`<ul class="approval-list">${approvals.map((a) => {
        const left = secondsLeft(a.expires_at, now);
        return html`<li class="card approval stack" data-testid="approval" data-confirmation="${a.confirmation_id}">
  <div class="spread"><strong class="big">${usd(a.amount_usd)}</strong>${pill('pending', 'waiting for you')}</div>
  <div><strong>${a.item_name}</strong> at ${a.merchant_name} <span class="muted small">${a.merchant_url}</span></div>
  <div class="muted small">Bot <a href="/bots/${a.bot_id}">${a.bot_name}</a>${a.category ? ` · category ${a.category}` : ''} · asked ${when(a.created_at)}</div>
  <div class="small" data-left="${left}">Expires ${when(a.expires_at)} <span class="countdown pill warn" aria-live="off"></span></div>
  <div class="row">${postButton(`/approvals/${a.confirmation_id}/approve`, 'Approve', csrf)}${postButton(
    `/approvals/${a.confirmation_id}/deny`,
    'Deny',
    csrf,
    { className: 'danger' },
  )}</div></li>`;
      })}</ul>`
    : html`<div class="card empty"><p class="muted">No purchase is waiting for your decision.</p></div>`;
  // Key facts first (amount and outcome), so a phone shows them on the first line of each entry.
  const history = decided.length
    ? dataTable(
        [
          { label: 'Amount', num: true, key: true },
          { label: 'Outcome', key: true },
          { label: 'What' },
          { label: 'Bot' },
          { label: 'Decided' },
        ],
        decided.map((d) => ({
          attrs: {
            'data-testid': 'decided',
            [d.kind === 'topup' ? 'data-topup' : 'data-confirmation']: d.id,
          } as Record<string, string>,
          cells: [
            usd(microsToUsd(d.amount_micros)),
            pill(d.status === 'declined' ? 'denied' : d.status, OUTCOME_WORDS[d.status] ?? d.status),
            d.kind === 'topup'
              ? html`Top-up <span class="muted small">“${d.item_name}”</span>`
              : html`${d.item_name} <span class="muted small">at ${d.merchant_name}</span>`,
            html`<a href="/bots/${d.bot_id}">${d.bot_name}</a>`,
            html`${when(d.decided_at)}${d.decided_by ? html` <span class="muted small">${DECIDED_BY[d.decided_by] ?? ''}</span>` : ''}`,
          ],
        })),
      )
    : html`<p class="muted">Nothing decided in the last 7 days.</p>`;
  const body = html`<h1>Approvals</h1>
<p class="lead">${
    approvals.length
      ? `${approvals.length} purchase${approvals.length === 1 ? '' : 's'} waiting for your decision. A purchase you do not decide in time expires and nothing is paid.`
      : 'Purchases your bots ask you to approve appear here, and we e-mail you about each.'
  }</p>
${data.top}
${data.bursts.map(
  (
    b,
  ) => html`<div class="flash warn stack" role="alert" data-testid="burst"><p><strong>${b.bot_name} asked for ${b.pending_purchases} purchases in ${minutesBetween(b.first_at, b.last_at)}.</strong> If you did not expect them, its API key and payment profiles file may be in someone else's hands: deny them all and freeze its wallet, then rotate its key.</p>
  <div class="row">${postButton(`/approvals/bots/${b.bot_id}/deny-all-and-freeze`, `Deny all ${b.pending_purchases} and freeze`, data.csrf, { className: 'danger' })}</div></div>`,
)}
${pending}
${topupSection(data.topups, csrf, data.noteMax)}
<section class="card" aria-labelledby="decided-h"><h2 id="decided-h">Recently decided</h2>${history}</section>`;
  return { title: 'Approvals', nav: 'approvals', body, scripts: ['/assets/countdown.js'] };
}

/** The inbox section of open top-up requests, oldest first, with Approve and Decline (and a note). */
function topupSection(open: OpenTopup[], csrf: string, noteMax: number): SafeHtml {
  if (open.length === 0) {
    return html`<section class="card" aria-labelledby="topups-h"><h2 id="topups-h">Top-up requests</h2><p class="muted">No bot is asking you for funds.</p></section>`;
  }
  return html`<section aria-labelledby="topups-h" class="stack"><h2 id="topups-h">Top-up requests</h2>
<ul class="approval-list">${open.map(
    (t) => html`<li class="card approval stack" data-testid="topup" data-topup="${t.topup_id}">
  <div class="spread"><strong class="big">${usd(t.amount_usd)}</strong>${pill('pending', 'asks for funds')}</div>
  <div>“${t.reason}”</div>
  <div class="muted small">Bot <a href="/bots/${t.bot_id}">${t.bot_name}</a> · asked ${when(t.created_at)} · open until ${when(t.expires_at)}</div>
  <div class="row">${postButton(`/approvals/topups/${t.topup_id}/approve`, `Approve and add ${usd(t.amount_usd)}`, csrf)}
  <form method="post" action="/approvals/topups/${t.topup_id}/decline" class="inline-form">${csrfField(csrf)}<div class="field"><input type="text" name="note" maxlength="${noteMax}" placeholder="Note for the bot (optional)" aria-label="Note for the bot"></div><button type="submit" class="danger">Decline</button></form></div></li>`,
  )}</ul></section>`;
}

/** The one-click link's confirmation page: what would be decided, and the button that does it. */
export function oneClickView(data: {
  decision: 'approve' | 'deny';
  target: OneClickTarget;
  now: number;
  csrf: string;
  link: { s?: string | undefined; e?: string | undefined; sig?: string | undefined };
}): PageView {
  const { decision, target: t, link } = data;
  const approve = decision === 'approve';
  const left = secondsLeft(present(t.expires_at, 'the expiry of a pending purchase'), data.now);
  const body = messageBody(
    approve ? 'Approve this purchase?' : 'Deny this purchase?',
    html`<div class="stack approval"><div class="big">${usd(microsToUsd(t.amount_micros))}</div>
  <div><strong>${t.item_name}</strong> at ${t.merchant_name} <span class="muted small">${t.merchant_url}</span></div>
  <div class="muted small">Bot ${t.bot_name}${t.category ? ` · category ${t.category}` : ''}</div>
  <div class="small" data-left="${left}">Expires ${when(t.expires_at)} <span class="countdown pill warn"></span></div></div>`,
    html`<form method="post" action="/approvals/one-click/${decision}">${csrfField(data.csrf)}
  <input type="hidden" name="s" value="${link.s ?? ''}"><input type="hidden" name="e" value="${link.e ?? ''}"><input type="hidden" name="sig" value="${link.sig ?? ''}">
  <div class="row"><button type="submit"${approve ? '' : html` class="danger"`}>${approve ? 'Approve purchase' : 'Deny purchase'}</button>
  <a class="button secondary" href="/approvals">Open the inbox instead</a></div></form>`,
  );
  return {
    title: approve ? 'Approve purchase' : 'Deny purchase',
    narrow: true,
    body,
    scripts: ['/assets/countdown.js'],
  };
}

/** A message about a one-click link (not valid, used, expired; or the outcome), pointing to the inbox. */
export function oneClickMessageView(title: string, text: string): PageView {
  return messageView(title, text, {
    actions: html`<a class="button" href="/approvals">Open the approvals inbox</a>`,
  });
}
