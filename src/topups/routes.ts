import { type Static, Type } from '@sinclair/typebox';
import type { App } from '../app.ts';
import { BOT_SECURITY } from '../bots/routes.ts';
import { OWNER_SECURITY } from '../owners/routes.ts';
import type { AppContext } from '../platform/context.ts';
import { ErrorBody, IdParam, RateLimitedBody } from '../platform/schemas.ts';
import {
  decideTopup,
  listBotTopups,
  listOwnerTopups,
  NOTE_MAX,
  REASON_MAX,
  requestTopup,
} from './service.ts';

// Bot: ask the owner for funds and list its own requests. Owner: list, approve (funds the card
// wallet), decline. Amounts in requests are cents like every other request of the API; the
// largest request is the largest single owner funding.

const MAX_CENTS = 1_000_000;

export const TopupRequestBody = Type.Object(
  {
    amount_cents: Type.Integer({
      minimum: 1,
      maximum: MAX_CENTS,
      description: 'Amount asked for, in cents.',
    }),
    reason: Type.String({
      minLength: 1,
      // Room for control characters that become spaces; the cleaned text is at most REASON_MAX.
      maxLength: REASON_MAX * 2,
      description: `Why the bot needs the funds, shown to the owner (at most ${REASON_MAX} characters).`,
    }),
  },
  { additionalProperties: false },
);

const BotTopup = Type.Object({
  topup_id: Type.String(),
  status: Type.Union([
    Type.Literal('pending'),
    Type.Literal('approved'),
    Type.Literal('declined'),
    Type.Literal('expired'),
  ]),
  amount_usd: Type.Number(),
  reason: Type.String(),
  approved_amount_usd: Type.Optional(Type.Number()),
  note: Type.Optional(Type.String()),
  created_at: Type.String(),
  expires_at: Type.String(),
  decided_at: Type.Union([Type.String(), Type.Null()]),
});

const TopupAnswer = Type.Object({ ...BotTopup.properties, message: Type.String() });
const BotTopupList = Type.Object({ topup_requests: Type.Array(BotTopup) });

const TopupParams = Type.Object({ topup_id: IdParam('topup') });
const PageFields = {
  limit: Type.Optional(Type.String({ pattern: '^[0-9]{1,3}$', description: '1 to 200 (default 50).' })),
  before: Type.Optional(
    Type.String({
      format: 'date-time',
      maxLength: 40,
      description: 'Only requests made before this time (the created_at of the last one you have).',
    }),
  ),
};
const BotListQuery = Type.Object(PageFields);

function pageLimit(raw: string | undefined): number {
  return Math.min(Math.max(raw === undefined ? 50 : Number(raw), 1), 200);
}

const OwnerListQuery = Type.Object({
  ...PageFields,
  status: Type.Optional(
    Type.Union([
      Type.Literal('pending'),
      Type.Literal('approved'),
      Type.Literal('declined'),
      Type.Literal('expired'),
      Type.Literal('all'),
    ]),
  ),
});
const ApproveBody = Type.Object(
  {
    amount_cents: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_CENTS,
        description: 'Fund this amount instead of the one asked for (cents).',
      }),
    ),
  },
  { additionalProperties: false },
);
const DeclineBody = Type.Object(
  {
    note: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: NOTE_MAX * 2,
        description: `Shown to the bot (at most ${NOTE_MAX} characters).`,
      }),
    ),
  },
  { additionalProperties: false },
);
const Loose = Type.Object({}, { additionalProperties: true });

/** Approve and decline take an optional body: a POST without one is the same as `{}`. */
async function emptyBodyIsObject(request: { body: unknown }): Promise<void> {
  if (request.body === undefined || request.body === null) request.body = {};
}

export async function registerTopupRoutes(app: App, ctx: AppContext): Promise<void> {
  app.post<{ Body: Static<typeof TopupRequestBody> }>(
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
      const result = await requestTopup(ctx, request.bot!.id, request.body);
      return reply.status(result.statusCode).send(result.body);
    },
  );

  app.get<{ Querystring: Static<typeof BotListQuery> }>(
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
      listBotTopups(ctx, request.bot!.id, {
        limit: pageLimit(request.query.limit),
        before: request.query.before,
      }),
  );

  app.get<{ Querystring: Static<typeof OwnerListQuery> }>(
    '/api/v1/owner/topup-requests',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: "Top-up requests of all the owner's bots (open ones unless status is given)",
        querystring: OwnerListQuery,
        response: { 200: Loose, 400: ErrorBody },
      },
    },
    async (request) =>
      listOwnerTopups(ctx, request.owner!.id, {
        status: request.query.status,
        limit: pageLimit(request.query.limit),
        before: request.query.before,
      }),
  );

  app.post<{ Params: Static<typeof TopupParams>; Body: Static<typeof ApproveBody> | undefined }>(
    '/api/v1/owner/topup-requests/:topup_id/approve',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: 'Approve a top-up request: funds the wallet (emits wallet.funded and wallet.topup_approved)',
        params: TopupParams,
        body: ApproveBody,
        response: { 200: Loose, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
      preValidation: emptyBodyIsObject,
    },
    async (request) =>
      decideTopup(ctx, request.owner!.id, request.params.topup_id, {
        approve: true,
        amountCents: request.body?.amount_cents,
      }),
  );

  app.post<{ Params: Static<typeof TopupParams>; Body: Static<typeof DeclineBody> | undefined }>(
    '/api/v1/owner/topup-requests/:topup_id/decline',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: 'Decline a top-up request, with an optional note for the bot (emits wallet.topup_declined)',
        params: TopupParams,
        body: DeclineBody,
        response: { 200: Loose, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
      preValidation: emptyBodyIsObject,
    },
    async (request) =>
      decideTopup(ctx, request.owner!.id, request.params.topup_id, {
        approve: false,
        note: request.body?.note,
      }),
  );
}
