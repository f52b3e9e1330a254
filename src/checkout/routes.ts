import { botOf } from '../bots/auth.ts';
import { ownerOf } from '../owners/auth.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { BOT_SECURITY, OWNER_SECURITY } from '../platform/http.ts';
import { ErrorBody, RateLimitedBody } from '../platform/schemas.ts';
import { decideByOwner } from '../spend/holds.ts';
import { checkoutStatus, listApprovals } from './decisions.ts';
import {
  ApprovalsResponse,
  Approved,
  CheckoutBody,
  CheckoutHeaders,
  ConfirmationParams,
  DecisionResponse,
  Pending,
  StatusQuery,
  StatusResponse,
} from './schemas.ts';
import { checkout } from './service.ts';

export async function registerCheckoutRoutes(app: App, ctx: AppContext): Promise<void> {
  app.post(
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
      const result = await checkout(ctx, botOf(request).id, request.body, request.headers['idempotency-key']);
      return reply.status(result.statusCode).send(result.body);
    },
  );

  app.get(
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
    async (request) => checkoutStatus(ctx, botOf(request).id, request.query.confirmation_id),
  );

  app.get(
    '/api/v1/owner/approvals',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: "Pending confirmations of all the owner's bots",
        response: { 200: ApprovalsResponse },
      },
    },
    async (request) => listApprovals(ctx, ownerOf(request).id),
  );

  for (const decision of ['approve', 'deny'] as const) {
    app.post(
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
          response: { 200: DecisionResponse, 404: ErrorBody, 409: ErrorBody },
        },
      },
      async (request) => decideByOwner(ctx, ownerOf(request).id, request.params.confirmation_id, decision),
    );
  }
}
