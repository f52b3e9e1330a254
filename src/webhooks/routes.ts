import { Type } from '@sinclair/typebox';
import { botOf } from '../bots/auth.ts';
import { ownerOf } from '../owners/auth.ts';
import { BotParams } from '../owners/schemas.ts';
import type { AppContext } from '../platform/context.ts';
import type { App } from '../platform/http.ts';
import { BOT_SECURITY, OWNER_SECURITY } from '../platform/http.ts';
import {
  DEFAULT_PAGE_LIMIT,
  ErrorBody,
  IdempotencyHeaders,
  IdParam,
  PageLimit,
} from '../platform/schemas.ts';
import { ackMessages, getDelivery, listDeliveries, listMessages, retryDelivery } from './service.ts';

const Message = Type.Object({
  id: Type.String(),
  event: Type.String(),
  timestamp: Type.String(),
  bot_id: Type.String(),
  data: Type.Object({}, { additionalProperties: true }),
});

const MessagesQuery = Type.Object({ limit: Type.Optional(PageLimit) });

export const AckBody = Type.Object({
  event_ids: Type.Array(IdParam('evt'), { minItems: 1, maxItems: 200 }),
});

const Delivery = Type.Object({
  id: Type.String(),
  event_id: Type.String(),
  event: Type.String(),
  status: Type.Union([
    Type.Literal('pending'),
    Type.Literal('delivered'),
    Type.Literal('failed'),
    Type.Literal('acked'),
  ]),
  attempts: Type.Integer(),
  waiting_for_tunnel: Type.Boolean({
    description:
      "True while the delivery waits for the bot's managed-tunnel client to connect for the first time (no attempt is made or counted until then; next_attempt_at is null)",
  }),
  created_at: Type.String(),
  last_attempt_at: Type.Union([Type.String(), Type.Null()]),
  next_attempt_at: Type.Union([Type.String(), Type.Null()]),
  delivered_at: Type.Union([Type.String(), Type.Null()]),
  response_status: Type.Union([Type.Integer(), Type.Null()]),
  response_excerpt: Type.Union([Type.String(), Type.Null()]),
  error: Type.Union([Type.String(), Type.Null()]),
  duration_ms: Type.Union([Type.Integer(), Type.Null()]),
  target: Type.Union([Type.String(), Type.Null()]),
});

const Attempt = Type.Object({
  attempt: Type.Integer({ description: '1 for the first attempt' }),
  attempted_at: Type.String(),
  ok: Type.Boolean({ description: 'A 2xx answer arrived' }),
  response_status: Type.Union([Type.Integer(), Type.Null()]),
  response_excerpt: Type.Union([Type.String(), Type.Null()], {
    description: 'First 1,024 bytes of the answer',
  }),
  error: Type.Union([Type.String(), Type.Null()]),
  duration_ms: Type.Union([Type.Integer(), Type.Null()]),
  target: Type.Union([Type.String(), Type.Null()]),
});

/** A delivery with every attempt kept for it (DELIVERY_LOG_RETENTION_DAYS), oldest first. */
const DeliveryWithAttempts = Type.Composite([Delivery, Type.Object({ attempt_log: Type.Array(Attempt) })]);

const DeliveriesQuery = Type.Object({
  limit: Type.Optional(PageLimit),
  status: Type.Optional(
    Type.Union([
      Type.Literal('pending'),
      Type.Literal('delivered'),
      Type.Literal('failed'),
      Type.Literal('acked'),
    ]),
  ),
  before: Type.Optional(Type.String({ format: 'date-time', maxLength: 40 })),
  include: Type.Optional(
    Type.Literal('attempts', {
      description: 'attempts: each delivery also lists its attempts (attempt_log)',
    }),
  ),
});

export async function registerWebhookRoutes(app: App, ctx: AppContext): Promise<void> {
  app.get(
    '/api/v1/bot/messages',
    {
      schema: {
        tags: ['bot'],
        summary: 'Events not yet delivered by webhook nor acknowledged, oldest first',
        security: BOT_SECURITY,
        querystring: MessagesQuery,
        response: {
          200: Type.Object({ messages: Type.Array(Message), has_more: Type.Boolean() }),
          400: ErrorBody,
          401: ErrorBody,
        },
      },
    },
    async (request) => listMessages(ctx, botOf(request).id, request.query.limit ?? DEFAULT_PAGE_LIMIT),
  );

  app.post(
    '/api/v1/bot/messages/ack',
    {
      schema: {
        tags: ['bot'],
        summary: 'Acknowledge events: they leave the queue and are no longer sent by webhook',
        security: BOT_SECURITY,
        body: AckBody,
        response: {
          200: Type.Object({
            acknowledged: Type.Array(Type.String()),
            not_found: Type.Array(Type.String()),
          }),
          400: ErrorBody,
          401: ErrorBody,
        },
      },
    },
    async (request) => ackMessages(ctx, botOf(request).id, request.body.event_ids),
  );

  app.get(
    '/api/v1/owner/bots/:bot_id/webhook-deliveries',
    {
      schema: {
        tags: ['owner'],
        summary: 'Webhook delivery log of a bot, newest first',
        security: OWNER_SECURITY,
        params: BotParams,
        querystring: DeliveriesQuery,
        response: {
          200: Type.Object({
            deliveries: Type.Array(
              Type.Composite([Delivery, Type.Object({ attempt_log: Type.Optional(Type.Array(Attempt)) })]),
            ),
            has_more: Type.Boolean(),
          }),
          400: ErrorBody,
          401: ErrorBody,
          404: ErrorBody,
        },
      },
    },
    async (request) =>
      listDeliveries(ctx, ownerOf(request).id, request.params.bot_id, {
        limit: request.query.limit ?? DEFAULT_PAGE_LIMIT,
        ...(request.query.status ? { status: request.query.status } : {}),
        ...(request.query.before ? { before: request.query.before } : {}),
        includeAttempts: request.query.include === 'attempts',
      }),
  );

  app.get(
    '/api/v1/owner/webhook-deliveries/:delivery_id',
    {
      schema: {
        tags: ['owner'],
        summary: 'One webhook delivery with every attempt kept for it, oldest first',
        security: OWNER_SECURITY,
        params: Type.Object({ delivery_id: IdParam('whd') }),
        response: {
          200: Type.Object({ delivery: DeliveryWithAttempts }),
          400: ErrorBody,
          401: ErrorBody,
          404: ErrorBody,
        },
      },
    },
    async (request) => getDelivery(ctx, ownerOf(request).id, request.params.delivery_id),
  );

  app.post(
    '/api/v1/owner/webhook-deliveries/:delivery_id/retry',
    {
      schema: {
        tags: ['owner'],
        summary: 'Send a failed or pending delivery again now',
        description:
          'Send an Idempotency-Key header to make retries of this call safe: the same key answers the first retry again instead of queuing another attempt.',
        security: OWNER_SECURITY,
        params: Type.Object({ delivery_id: IdParam('whd') }),
        headers: IdempotencyHeaders,
        response: {
          200: Type.Object({ delivery: Delivery }),
          401: ErrorBody,
          404: ErrorBody,
          409: ErrorBody,
        },
      },
    },
    async (request) =>
      retryDelivery(ctx, ownerOf(request).id, request.params.delivery_id, request.headers['idempotency-key']),
  );
}
