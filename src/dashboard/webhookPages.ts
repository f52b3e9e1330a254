import type { FastifyReply, FastifyRequest } from 'fastify';
import { getBot } from '../owners/bots.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { assertOwnDelivery, type DeliveryFilter, deliveryLog } from '../webhooks/log.ts';
import { retryDelivery } from '../webhooks/service.ts';
import { NOTICES, noticeFlash, tags } from './forms.ts';
import type { SafeHtml } from './html.ts';
import { sessionOf } from './http.ts';
import { BotParams, CsrfForm, DeliveryParams, WebhookLogQuery } from './schemas.ts';
import { flash } from './views/layout.ts';
import { webhookLogView } from './views/webhooks.ts';

// The webhook delivery log of a bot (src/dashboard/views/webhooks.ts draws it; the rows come from
// src/webhooks/log.ts) and a manual retry of failed or pending deliveries (src/webhooks/service.ts
// retryDelivery: audit log + wake-up of the workers).

const PAGE_SIZE = 50;

export function registerWebhookPages(app: App, ctx: AppContext): void {
  const logPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    botId: string,
    opts: { status?: number; top?: SafeHtml | string; filter?: DeliveryFilter; before?: string } = {},
  ) => {
    const session = sessionOf(request);
    const bot = await getBot(ctx, session.ownerId, botId);
    const { deliveries, has_more } = await deliveryLog(ctx, botId, {
      limit: PAGE_SIZE,
      filter: opts.filter,
      before: opts.before,
    });
    const view = webhookLogView({
      csrf: session.csrfToken,
      bot,
      deliveries,
      hasMore: has_more,
      filter: opts.filter,
      top: opts.top ?? '',
    });
    return reply.page(view, opts.status ?? 200);
  };

  app.get(
    '/bots/:bot_id/webhooks',
    {
      schema: {
        tags,
        summary: 'Webhook delivery log of a bot',
        params: BotParams,
        querystring: WebhookLogQuery,
      },
    },
    async (request, reply) =>
      logPage(request, reply, request.params.bot_id, {
        top: noticeFlash(request.query.notice, NOTICES.webhooks),
        ...(request.query.status ? { filter: request.query.status } : {}),
        ...(request.query.before ? { before: request.query.before } : {}),
      }),
  );

  app.post(
    '/bots/:bot_id/webhooks/:delivery_id/retry',
    {
      schema: {
        tags,
        summary: 'Send a failed or pending webhook delivery again now',
        params: DeliveryParams,
        body: CsrfForm,
      },
    },
    async (request, reply) => {
      const { bot_id: botId, delivery_id: deliveryId } = request.params;
      const ownerId = sessionOf(request).ownerId;
      // The delivery must be this bot's (and the bot the owner's): anything else is 404.
      await assertOwnDelivery(ctx, ownerId, botId, deliveryId);
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
