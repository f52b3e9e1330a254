import type { getBot } from '../../owners/bots.ts';
import type { DeliveryFilter, LoggedDelivery } from '../../webhooks/log.ts';
import { html, type SafeHtml } from '../html.ts';
import { WAITING_FOR_TUNNEL_TEXT } from './bots.ts';
import { botTabs, type PageView, pill, postButton, when } from './layout.ts';

const capitalised = (text: string) => `${text.charAt(0).toUpperCase()}${text.slice(1)}`;

// The webhook delivery log of a bot: a dense table (one row per delivery, the error below it, the
// payload that was sent and the response excerpt one click away), filters by status including
// "retrying" (pending after a failed attempt), and "Retry now" on failed or pending deliveries.

type OwnerBot = Awaited<ReturnType<typeof getBot>>;

/** Filters: the stored statuses, and "retrying" = pending with at least one failed attempt. */
export const FILTERS: readonly DeliveryFilter[] = ['retrying', 'pending', 'delivered', 'failed', 'acked'];
const FILTER_WORDS: Record<string, string> = {
  retrying: 'retrying',
  pending: 'pending',
  delivered: 'delivered',
  failed: 'failed',
  acked: 'acknowledged by the bot',
};

/** The payload as sent, indented for reading when it is JSON. */
function readablePayload(body: string): string {
  try {
    return JSON.stringify(JSON.parse(body), null, 2);
  } catch {
    return body;
  }
}

function deliveryStatus(d: LoggedDelivery): SafeHtml {
  if (d.waiting_for_tunnel) return pill('pending', 'waiting for tunnel');
  if (d.status === 'pending' && d.attempts > 0) return pill('degraded', 'retrying');
  return pill(d.status, FILTER_WORDS[d.status] ?? d.status);
}

export function webhookLogView(data: {
  csrf: string;
  bot: OwnerBot;
  deliveries: LoggedDelivery[];
  hasMore: boolean;
  filter?: DeliveryFilter | undefined;
  top: SafeHtml | string;
}): PageView {
  const { bot, deliveries, csrf, filter } = data;
  const has_more = data.hasMore;
  const base = `/bots/${bot.bot_id}/webhooks`;
  const last = deliveries.at(-1);
  const filters = html`<nav class="filters" aria-label="Filter">${[
    ['', 'All'],
    ...FILTERS.map((f) => [f, FILTER_WORDS[f] ?? f]),
  ].map(
    ([value, label]) =>
      html`<a href="${base}${value ? `?status=${value}` : ''}"${(filter ?? '') === value ? html` aria-current="page"` : ''}>${label}</a>`,
  )}</nav>`;
  const columns = ['Event', 'Status', 'Response', 'Attempts', 'Last attempt', 'Next attempt', ''];
  const list = deliveries.length
    ? html`<div class="card"><div class="table-wrap"><table class="rt dense deliveries"><thead><tr>${columns.map(
        (c) => html`<th scope="col">${c}</th>`,
      )}</tr></thead>${deliveries.map(
        (d) => html`<tbody data-testid="delivery" data-delivery="${d.id}" data-status="${d.status}"><tr>
  <td class="k" data-label="Event"><strong>${d.event_type}</strong><br><span class="muted small">${when(d.created_at)}</span></td>
  <td class="k" data-label="Status">${deliveryStatus(d)}</td>
  <td data-label="Response" class="nw">${d.response_status ?? html`<span class="muted">—</span>`}${d.duration_ms !== null ? html` <span class="muted small">${d.duration_ms} ms</span>` : ''}</td>
  <td data-label="Attempts" class="num">${d.attempts}</td>
  <td data-label="Last attempt">${when(d.last_attempt_at)}</td>
  <td data-label="Next attempt">${d.waiting_for_tunnel ? html`<span class="muted">when the tunnel connects</span>` : d.status === 'pending' && d.next_attempt_at ? when(d.next_attempt_at) : html`<span class="muted">—</span>`}</td>
  <td data-label="">${
    d.status === 'failed' || d.status === 'pending'
      ? postButton(`${base}/${d.id}/retry`, 'Retry now', csrf, { className: 'secondary' })
      : ''
  }</td></tr>
<tr class="sub"><td colspan="7">${d.waiting_for_tunnel ? html`<div class="small muted" data-testid="delivery-waiting">${capitalised(WAITING_FOR_TUNNEL_TEXT)}.</div>` : d.error ? html`<div class="err small" data-testid="delivery-error">${d.error}</div>` : ''}
  <div class="row small">${
    d.body
      ? html`<details><summary>Payload sent</summary><pre class="excerpt" data-testid="payload">${readablePayload(d.body)}</pre></details>`
      : ''
  }${
    d.response_excerpt
      ? html`<details><summary>Response excerpt</summary><pre class="excerpt" data-testid="response-excerpt">${d.response_excerpt}</pre></details>`
      : ''
  }<span class="muted"><code>${d.event_id}</code>${d.target ? html` to <code>${d.target}</code>` : ''}</span></div></td></tr></tbody>`,
      )}</table></div></div>${
        has_more && last
          ? html`<p><a href="${base}?${new URLSearchParams({ ...(filter ? { status: filter } : {}), before: last.created_at }).toString()}">Older deliveries →</a></p>`
          : ''
      }`
    : html`<div class="card empty"><p class="muted">No deliveries${filter ? ` that are ${FILTER_WORDS[filter] ?? filter}` : ''} yet. Every event for the bot (funding, purchases…) is delivered to its webhook and listed here.</p></div>`;
  const body = html`<p class="small"><a href="/">← All bots</a></p>
<h1>${bot.bot_name}: webhook log</h1>
<p class="lead">Webhooks go to ${
    bot.webhook.callback_url
      ? html`<code>${bot.webhook.callback_url}</code>`
      : html`the managed tunnel <code>${bot.webhook.tunnel_hostname ?? ''}</code>`
  }. Failed deliveries are retried automatically with growing pauses; "Retry now" sends one again at once.</p>
${botTabs(bot.bot_id, 'webhooks')}
${data.top}
${filters}
${list}`;
  return { title: `${bot.bot_name}: webhook log`, nav: 'bots', body };
}
