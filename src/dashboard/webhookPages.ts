import { type Static, Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import { getBot } from '../owners/service.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { ApiError, notFound } from '../platform/errors.ts';
import { IdParam } from '../platform/schemas.ts';
import { iso } from '../platform/time.ts';
import { retryDelivery } from '../webhooks/service.ts';
import { html, type SafeHtml } from './html.ts';
import { botTabs, flash, page, pill, postButton, when } from './layout.ts';

// The webhook delivery log of a bot: a dense table (one row per delivery, the error below it, the
// payload that was sent and the response excerpt one click away), filters by status including
// "retrying" (pending after a failed attempt), and a manual retry of failed or pending deliveries
// (src/webhooks/service.ts retryDelivery: audit log + wake-up of the workers).

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));
const BotParams = Type.Object({ bot_id: IdParam('bot') });
const DeliveryParams = Type.Object({ bot_id: IdParam('bot'), delivery_id: IdParam('whd') });
const STATUSES = ['pending', 'delivered', 'failed', 'acked'] as const;
/** Filters: the stored statuses, and "retrying" = pending with at least one failed attempt. */
const FILTERS = ['retrying', ...STATUSES] as const;
const FILTER_WORDS: Record<string, string> = {
  retrying: 'retrying',
  pending: 'pending',
  delivered: 'delivered',
  failed: 'failed',
  acked: 'acknowledged by the bot',
};

interface LogRow {
  id: string;
  event_id: string;
  event_type: string;
  status: string;
  attempts: number;
  next_attempt_at: Date;
  last_attempt_at: Date | null;
  response_status: number | null;
  response_excerpt: string | null;
  error: string | null;
  duration_ms: number | null;
  target: string | null;
  created_at: Date;
  body: string | null;
  [key: string]: unknown;
}

async function deliveryLog(
  ctx: AppContext,
  botId: string,
  options: { limit: number; filter?: string | undefined; before?: string | undefined },
) {
  const status = options.filter === 'retrying' ? 'pending' : (options.filter ?? null);
  const rows = await ctx.db.query<LogRow>(
    `SELECT d.id, d.event_id, d.event_type, d.status, d.attempts, d.next_attempt_at, d.last_attempt_at,
            d.response_status, d.response_excerpt, d.error, d.duration_ms, d.target, d.created_at, e.body
       FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id AND e.bot_id = d.bot_id
      WHERE d.bot_id = $1
        AND ($2::text IS NULL OR d.status = $2)
        AND (NOT $3::boolean OR d.attempts > 0)
        AND ($4::timestamptz IS NULL OR d.created_at < $4)
      ORDER BY d.created_at DESC, d.id DESC
      LIMIT $5`,
    [botId, status, options.filter === 'retrying', options.before ?? null, options.limit + 1],
  );
  return { deliveries: rows.slice(0, options.limit), has_more: rows.length > options.limit };
}

/** The payload as sent, indented for reading when it is JSON. */
function readablePayload(body: string): string {
  try {
    return JSON.stringify(JSON.parse(body), null, 2);
  } catch {
    return body;
  }
}

function deliveryStatus(d: LogRow): SafeHtml {
  if (d.status === 'pending' && d.attempts > 0) return pill('degraded', 'retrying');
  return pill(d.status, FILTER_WORDS[d.status] ?? d.status);
}
const PAGE_SIZE = 50;

function sendHtml(reply: FastifyReply, status: number, body: string) {
  return reply.status(status).type('text/html; charset=utf-8').send(body);
}

export function registerWebhookPages(app: App, ctx: AppContext): void {
  const logPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    botId: string,
    opts: { status?: number; top?: SafeHtml | string; filter?: string; before?: string } = {},
  ) => {
    const session = request.dashboard!;
    const bot = await getBot(ctx, session.ownerId, botId);
    const { deliveries, has_more } = await deliveryLog(ctx, botId, {
      limit: PAGE_SIZE,
      filter: opts.filter,
      before: opts.before,
    });
    const csrf = session.csrfToken;
    const base = `/bots/${bot.bot_id}/webhooks`;
    const last = deliveries.at(-1);
    const filters = html`<nav class="filters" aria-label="Filter">${[
      ['', 'All'],
      ...FILTERS.map((f) => [f, FILTER_WORDS[f]!]),
    ].map(
      ([value, label]) =>
        html`<a href="${base}${value ? `?status=${value}` : ''}"${(opts.filter ?? '') === value ? html` aria-current="page"` : ''}>${label}</a>`,
    )}</nav>`;
    const columns = ['Event', 'Status', 'Response', 'Attempts', 'Last attempt', 'Next attempt', ''];
    const list = deliveries.length
      ? html`<div class="card"><div class="table-wrap"><table class="rt dense deliveries"><thead><tr>${columns.map(
          (c) => html`<th scope="col">${c}</th>`,
        )}</tr></thead>${deliveries.map(
          (d) => html`<tbody data-testid="delivery" data-delivery="${d.id}" data-status="${d.status}"><tr>
  <td class="k" data-label="Event"><strong>${d.event_type}</strong><br><span class="muted small">${when(iso(d.created_at))}</span></td>
  <td class="k" data-label="Status">${deliveryStatus(d)}</td>
  <td data-label="Response" class="nw">${d.response_status ?? html`<span class="muted">—</span>`}${d.duration_ms !== null ? html` <span class="muted small">${d.duration_ms} ms</span>` : ''}</td>
  <td data-label="Attempts" class="num">${d.attempts}</td>
  <td data-label="Last attempt">${when(d.last_attempt_at ? iso(d.last_attempt_at) : null)}</td>
  <td data-label="Next attempt">${d.status === 'pending' ? when(iso(d.next_attempt_at)) : html`<span class="muted">—</span>`}</td>
  <td data-label="">${
    d.status === 'failed' || d.status === 'pending'
      ? postButton(`${base}/${d.id}/retry`, 'Retry now', csrf, { className: 'secondary' })
      : ''
  }</td></tr>
<tr class="sub"><td colspan="7">${d.error ? html`<div class="err small" data-testid="delivery-error">${d.error}</div>` : ''}
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
            ? html`<p><a href="${base}?${new URLSearchParams({ ...(opts.filter ? { status: opts.filter } : {}), before: iso(last.created_at) }).toString()}">Older deliveries →</a></p>`
            : ''
        }`
      : html`<div class="card empty"><p class="muted">No deliveries${opts.filter ? ` that are ${FILTER_WORDS[opts.filter] ?? opts.filter}` : ''} yet. Every event for the bot (funding, purchases…) is delivered to its webhook and listed here.</p></div>`;
    const body = html`<p class="small"><a href="/">← All bots</a></p>
<h1>${bot.bot_name}: webhook log</h1>
<p class="lead">Webhooks go to ${
      bot.webhook.callback_url
        ? html`<code>${bot.webhook.callback_url}</code>`
        : html`the managed tunnel <code>${bot.webhook.tunnel_hostname ?? ''}</code>`
    }. Failed deliveries are retried automatically with growing pauses; "Retry now" sends one again at once.</p>
${botTabs(bot.bot_id, 'webhooks')}
${opts.top ?? ''}
${filters}
${list}`;
    return sendHtml(
      reply,
      opts.status ?? 200,
      page({ title: `${bot.bot_name}: webhook log`, session, nav: 'bots', body }),
    );
  };

  app.get<{
    Params: Static<typeof BotParams>;
    Querystring: { status?: string; before?: string; notice?: string };
  }>(
    '/bots/:bot_id/webhooks',
    {
      schema: {
        tags,
        summary: 'Webhook delivery log of a bot',
        params: BotParams,
        querystring: Type.Object({
          status: Type.Optional(Type.Union(FILTERS.map((s) => Type.Literal(s)))),
          before: Type.Optional(Type.String({ format: 'date-time', maxLength: 40 })),
          notice: Text(40),
        }),
      },
    },
    async (request, reply) =>
      logPage(request, reply, request.params.bot_id, {
        top:
          request.query.notice === 'retried'
            ? flash(
                'ok',
                'The delivery is queued to be sent again now. Reload in a moment to see the result.',
              )
            : '',
        ...(request.query.status ? { filter: request.query.status } : {}),
        ...(request.query.before ? { before: request.query.before } : {}),
      }),
  );

  app.post<{ Params: Static<typeof DeliveryParams> }>(
    '/bots/:bot_id/webhooks/:delivery_id/retry',
    {
      schema: {
        tags,
        summary: 'Send a failed or pending webhook delivery again now',
        params: DeliveryParams,
        body: Type.Object({ _csrf: Text(200) }),
      },
    },
    async (request, reply) => {
      const { bot_id: botId, delivery_id: deliveryId } = request.params;
      const ownerId = request.dashboard!.ownerId;
      // The delivery must be this bot's (and the bot the owner's): anything else is 404.
      const own = await maybeOne(
        ctx.db,
        `SELECT 1 AS found FROM webhook_deliveries d JOIN bots b ON b.id = d.bot_id
          WHERE d.id = $1 AND d.bot_id = $2 AND b.owner_id = $3`,
        [deliveryId, botId, ownerId],
      );
      if (!own) throw notFound('Delivery');
      try {
        await retryDelivery(ctx, ownerId, deliveryId);
      } catch (err) {
        if (err instanceof ApiError && err.code === 'conflict') {
          return logPage(request, reply, botId, {
            status: 409,
            top: flash('bad', `${err.message} Nothing changed.`),
          });
        }
        throw err;
      }
      return reply.redirect(`/bots/${botId}/webhooks?notice=retried`, 303);
    },
  );
}
