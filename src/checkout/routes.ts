import { type Static, Type } from '@sinclair/typebox';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { BOT_SECURITY, OWNER_SECURITY } from '../platform/http.ts';
import { ErrorBody, IdParam, RateLimitedBody } from '../platform/schemas.ts';
import { checkoutStatus, decideByOwner, listApprovals } from './decisions.ts';
import { checkout } from './service.ts';

// Unknown fields are refused (a `currency` the service does not read must not be taken for USD).
// profile_index outside 1–6 is the chain's invalid_profile, not a validation error.
export const CheckoutBody = Type.Object(
  {
    profile_index: Type.Integer({ minimum: -2_147_483_648, maximum: 2_147_483_647 }),
    merchant_name: Type.String({ minLength: 1, maxLength: 200 }),
    merchant_url: Type.String({ minLength: 1, maxLength: 2000 }),
    item_name: Type.String({ minLength: 1, maxLength: 500 }),
    amount_cents: Type.Integer({ minimum: 1, maximum: 10_000_000 }),
    category: Type.Optional(Type.String({ maxLength: 100 })),
    task_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    card_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  },
  { additionalProperties: false },
);

const CheckoutHeaders = Type.Object({
  'idempotency-key': Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
});

const Approved = Type.Object({
  approved: Type.Literal(true),
  missing_digits: Type.String(),
  expiry_month: Type.String(),
  expiry_year: Type.String(),
  confirmation_id: Type.String(),
  profile_index: Type.Integer(),
  merchant_name: Type.String(),
  amount_usd: Type.Number(),
  message: Type.String(),
});

const Pending = Type.Object({
  approved: Type.Literal(false),
  status: Type.Literal('pending_confirmation'),
  confirmation_id: Type.String(),
  profile_index: Type.Integer(),
  merchant_name: Type.String(),
  amount_usd: Type.Number(),
  expires_at: Type.String(),
  message: Type.String(),
});

export const StatusQuery = Type.Object({ confirmation_id: Type.String({ minLength: 1, maxLength: 100 }) });

const StatusResponse = Type.Object({
  confirmation_id: Type.String(),
  status: Type.Union([
    Type.Literal('pending'),
    Type.Literal('approved'),
    Type.Literal('denied'),
    Type.Literal('expired'),
  ]),
  amount_usd: Type.Number(),
  merchant_name: Type.String(),
  item_name: Type.String(),
  message: Type.String(),
  missing_digits: Type.Optional(Type.String()),
  expiry_month: Type.Optional(Type.String()),
  expiry_year: Type.Optional(Type.String()),
  expires_at: Type.Optional(Type.String()),
});

const Loose = Type.Object({}, { additionalProperties: true });
const ConfirmationParams = Type.Object({ confirmation_id: IdParam('chk') });

export async function registerCheckoutRoutes(app: App, ctx: AppContext): Promise<void> {
  app.post<{ Body: Static<typeof CheckoutBody>; Headers: Static<typeof CheckoutHeaders> }>(
    '/api/v1/bot/merchant/checkout',
    {
      schema: {
        tags: ['bot'],
        summary: 'Request a purchase (guardrail chain; approved, held for approval, or refused)',
        description:
          'Send an Idempotency-Key header (at most 255 characters) to make retries safe: the first successful response is replayed for 24 hours.',
        security: BOT_SECURITY,
        headers: CheckoutHeaders,
        body: CheckoutBody,
        response: {
          200: Approved,
          202: Pending,
          400: ErrorBody,
          401: ErrorBody,
          402: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
          409: ErrorBody,
          429: RateLimitedBody,
        },
      },
    },
    async (request, reply) => {
      if (request.body.profile_index < 1 || request.body.profile_index > 6) {
        throw new ApiError('invalid_profile', 'No permissions found for the given profile_index.');
      }
      const result = await checkout(ctx, request.bot!.id, request.body, request.headers['idempotency-key']);
      return reply.status(result.statusCode).send(result.body);
    },
  );

  app.get<{ Querystring: Static<typeof StatusQuery> }>(
    '/api/v1/bot/merchant/checkout/status',
    {
      schema: {
        tags: ['bot'],
        summary: 'Poll a checkout confirmation',
        security: BOT_SECURITY,
        querystring: StatusQuery,
        response: { 200: StatusResponse, 400: ErrorBody, 401: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => checkoutStatus(ctx, request.bot!.id, request.query.confirmation_id),
  );

  app.get(
    '/api/v1/owner/approvals',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: "Pending confirmations of all the owner's bots",
        response: { 200: Loose },
      },
    },
    async (request) => listApprovals(ctx, request.owner!.id),
  );

  for (const decision of ['approve', 'deny'] as const) {
    app.post<{ Params: Static<typeof ConfirmationParams> }>(
      `/api/v1/owner/approvals/:confirmation_id/${decision}`,
      {
        schema: {
          tags: ['owner'],
          security: OWNER_SECURITY,
          summary:
            decision === 'approve'
              ? 'Approve a pending purchase (captures the hold; emits purchase.approved)'
              : 'Deny a pending purchase (releases the hold; emits purchase.denied)',
          params: ConfirmationParams,
          response: { 200: Loose, 404: ErrorBody, 409: ErrorBody },
        },
      },
      async (request) => decideByOwner(ctx, request.owner!.id, request.params.confirmation_id, decision),
    );
  }
}
