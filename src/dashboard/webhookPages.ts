import { type Static, Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import { getBot } from '../owners/service.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { ApiError, notFound } from '../platform/errors.ts';
import { IdParam } from '../platform/schemas.ts';
import { listDeliveries, retryDelivery } from '../webhooks/service.ts';
import { html, type SafeHtml } from './html.ts';
import { botTabs, flash, page, pill, postButton, when } from './layout.ts';

// The webhook delivery log of a bot (src/webhooks/service.ts listDeliveries) with a manual retry
// of failed or pending deliveries (retryDelivery: audit log + wake-up of the workers).

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));
const BotParams = Type.Object({ bot_id: IdParam('bot') });
const DeliveryParams = Type.Object({ bot_id: IdParam('bot'), delivery_id: IdParam('whd') });
const STATUSES = ['pending', 'delivered', 'failed', 'acked'] as const;
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
    const { deliveries, has_more } = await listDeliveries(ctx, session.ownerId, botId, {
      limit: PAGE_SIZE,
      ...(opts.filter ? { status: opts.filter } : {}),
      ...(opts.before ? { before: opts.before } : {}),
    });
    const csrf = session.csrfToken;
    const base = `/bots/${bot.bot_id}/webhooks`;
    const last = deliveries.at(-1);
    const filters = html`<nav class="row small" aria-label="Filter">${[
      ['', 'All'],
      ...STATUSES.map((s) => [s, s]),
    ].map(
      ([value, label]) =>
        html`<a href="${base}${value ? `?status=${value}` : ''}"${(opts.filter ?? '') === value ? html` aria-current="page" class="pill"` : ''}>${label}</a>`,
    )}</nav>`;
    const list = deliveries.length
      ? html`<ul class="delivery-list">${deliveries.map(
          (d) => html`<li class="card delivery stack" data-testid="delivery" data-delivery="${d.id}">
  <div class="spread"><div><strong>${d.event}</strong> <code class="small">${d.event_id}</code></div>${d.status === 'pending' && d.attempts > 0 ? pill('pending', 'retrying') : pill(d.status)}</div>
  <dl class="facts">
    <div><dt>Attempts</dt><dd>${d.attempts}</dd></div>
    <div><dt>Last attempt</dt><dd>${when(d.last_attempt_at)}</dd></div>
    <div><dt>Next attempt</dt><dd>${when(d.next_attempt_at)}</dd></div>
    <div><dt>Response</dt><dd>${d.response_status ?? html`<span class="muted">—</span>`}${d.duration_ms !== null ? html` <span class="muted small">${d.duration_ms} ms</span>` : ''}</dd></div>
  </dl>
  ${d.error ? html`<div class="flash bad small">${d.error}</div>` : ''}
  ${d.response_excerpt ? html`<details><summary>Response excerpt</summary><pre class="excerpt">${d.response_excerpt}</pre></details>` : ''}
  <div class="spread small muted"><span>Created ${when(d.created_at)}${d.target ? html` · to <code>${d.target}</code>` : ''}</span>${
    d.status === 'failed' || d.status === 'pending'
      ? postButton(`${base}/${d.id}/retry`, 'Retry now', csrf, { className: 'secondary' })
      : ''
  }</div></li>`,
        )}</ul>${
          has_more && last
            ? html`<p><a href="${base}?${new URLSearchParams({ ...(opts.filter ? { status: opts.filter } : {}), before: last.created_at }).toString()}">Older deliveries →</a></p>`
            : ''
        }`
      : html`<div class="card empty"><p class="muted">No deliveries${opts.filter ? ` with status ${opts.filter}` : ''} yet. Every event for the bot (funding, purchases…) is delivered to its webhook and listed here.</p></div>`;
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
          status: Type.Optional(Type.Union(STATUSES.map((s) => Type.Literal(s)))),
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
