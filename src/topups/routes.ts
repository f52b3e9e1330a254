import { BOT_SECURITY, OWNER_SECURITY, type App } from '../platform/http.ts';
import type { AppContext } from '../platform/context.ts';
import { botOf } from '../bots/auth.ts';
import { ownerOf } from '../owners/auth.ts';
import { DEFAULT_PAGE_LIMIT, ErrorBody, IdempotencyHeaders, RateLimitedBody } from '../platform/schemas.ts';
import { centsToMicros } from '../platform/money.ts';
import {
  ApproveBody,
  BotListQuery,
  BotTopupList,
  DeclineBody,
  OwnerListQuery,
  OwnerTopupList,
  TopupAnswer,
  TopupDecision,
  TopupParams,
  TopupRequestBody,
} from './schemas.ts';
import { decideTopup, listBotTopups, listOwnerTopups, requestTopup } from './service.ts';

// Bot: ask the owner for funds and list its own requests. Owner: list, approve (funds the card
// wallet), decline. Amounts in requests are cents like every other request of the API; the
// largest request is the largest single owner funding.

/** Approve and decline take an optional body: a POST without one is the same as `{}`. */
async function emptyBodyIsObject(request: { body: unknown }): Promise<void> {
  if (request.body === undefined || request.body === null) request.body = {};
}

export async function registerTopupRoutes(app: App, ctx: AppContext): Promise<void> {
  app.post(
    '/api/v1/bot/wallet/topup-requests',
    {
      schema: {
        tags: ['bot'],
        summary: 'Ask the owner for funds (a top-up request)',
        description:
          'Active bots only. Asking again for the same amount and reason while that request is open returns it (200) instead of a new one (201). Limits: TOPUP_REQUESTS_PER_DAY asks a rolling day (refused asks count too) and TOPUP_REQUESTS_OPEN_MAX open at once; 429 with Retry-After otherwise.',
        security: BOT_SECURITY,
        body: TopupRequestBody,
        response: {
          200: TopupAnswer,
          201: TopupAnswer,
          400: ErrorBody,
          401: ErrorBody,
          403: ErrorBody,
          429: RateLimitedBody,
        },
      },
    },
    async (request, reply) => {
      const result = await requestTopup(ctx, botOf(request).id, request.body);
      return reply.status(result.statusCode).send(result.body);
    },
  );

  app.get(
    '/api/v1/bot/wallet/topup-requests',
    {
      schema: {
        tags: ['bot'],
        summary: 'Your top-up requests and their status, newest first (paged)',
        security: BOT_SECURITY,
        querystring: BotListQuery,
        response: { 200: BotTopupList, 400: ErrorBody, 401: ErrorBody },
      },
    },
    async (request) =>
      listBotTopups(ctx, botOf(request).id, {
        limit: request.query.limit ?? DEFAULT_PAGE_LIMIT,
        before: request.query.before,
      }),
  );

  app.get(
    '/api/v1/owner/topup-requests',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: "Top-up requests of all the owner's bots (open ones unless status is given)",
        querystring: OwnerListQuery,
        response: { 200: OwnerTopupList, 400: ErrorBody },
      },
    },
    async (request) =>
      listOwnerTopups(ctx, ownerOf(request).id, {
        status: request.query.status,
        limit: request.query.limit ?? DEFAULT_PAGE_LIMIT,
        before: request.query.before,
      }),
  );

  app.post(
    '/api/v1/owner/topup-requests/:topup_id/approve',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: 'Approve a top-up request: funds the wallet (emits wallet.funded and wallet.topup_approved)',
        description:
          'Send an Idempotency-Key header to make retries safe: a retry with the same key and body answers the first approval again instead of 409 not_pending.',
        params: TopupParams,
        headers: IdempotencyHeaders,
        body: ApproveBody,
        response: { 200: TopupDecision, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
      preValidation: emptyBodyIsObject,
    },
    async (request) =>
      decideTopup(
        ctx,
        ownerOf(request).id,
        request.params.topup_id,
        {
          approve: true,
          amountMicros:
            request.body?.amount_cents === undefined ? undefined : centsToMicros(request.body.amount_cents),
        },
        request.headers['idempotency-key'],
      ),
  );

  app.post(
    '/api/v1/owner/topup-requests/:topup_id/decline',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: 'Decline a top-up request, with an optional note for the bot (emits wallet.topup_declined)',
        params: TopupParams,
        headers: IdempotencyHeaders,
        body: DeclineBody,
        response: { 200: TopupDecision, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
      preValidation: emptyBodyIsObject,
    },
    async (request) =>
      decideTopup(
        ctx,
        ownerOf(request).id,
        request.params.topup_id,
        { approve: false, note: request.body?.note },
        request.headers['idempotency-key'],
      ),
  );
}
