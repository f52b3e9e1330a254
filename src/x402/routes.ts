import { type Static, Type } from '@sinclair/typebox';
import type { App } from '../app.ts';
import { BOT_SECURITY } from '../bots/routes.ts';
import { settleIfDue } from '../checkout/decisions.ts';
import { BotParams, OWNER_SECURITY } from '../owners/routes.ts';
import type { AppContext } from '../platform/context.ts';
import { ErrorBody, IdParam, RateLimitedBody } from '../platform/schemas.ts';
import { getX402Wallet, listX402Payments, updateX402Settings } from './owner.ts';
import { reconcileWallet } from './reconcile.ts';
import { pay, paymentStatus } from './service.ts';
import { OwnerSettingsBody, PayApproved, PayBody, PayHeaders, PayPending, PaymentPoll } from './schemas.ts';

// Bot: POST /api/v1/bot/x402/pay and GET /api/v1/bot/x402/payments/{payment_id}.
// Owner: GET / PATCH /api/v1/owner/bots/{bot_id}/x402 and GET …/x402/payments. Turning the rail on
// is PUT /api/v1/owner/bots/{bot_id}/rails/partner_wallet (src/owners/routes.ts → wallet.ts).

const Loose = Type.Object({}, { additionalProperties: true });
const PaymentParams = Type.Object({ payment_id: IdParam('chk') });

export async function registerX402Routes(app: App, ctx: AppContext): Promise<void> {
  app.post<{ Body: Static<typeof PayBody>; Headers: Static<typeof PayHeaders> }>(
    '/api/v1/bot/x402/pay',
    {
      schema: {
        tags: ['bot'],
        summary:
          'Pay an HTTP 402 (x402) resource from the partner wallet (guardrail chain; approved, held or refused)',
        description:
          'Send the payment requirements the 402 response carried (x402 v2 `accepts`, or one entry of it) and the resource URL. ' +
          'Approved: the signed payment and `payment_header`, the value of the PAYMENT-SIGNATURE header for the retried request. ' +
          'Held: 202 with `expires_at`; poll GET /api/v1/bot/x402/payments/{payment_id}. ' +
          'Amounts are atomic USDC units (6 decimals) and must be whole cents (multiples of 10000). ' +
          'Send an Idempotency-Key header to make retries safe.',
        security: BOT_SECURITY,
        headers: PayHeaders,
        body: PayBody,
        response: {
          200: PayApproved,
          202: PayPending,
          400: ErrorBody,
          401: ErrorBody,
          402: ErrorBody,
          403: ErrorBody,
          409: ErrorBody,
          429: RateLimitedBody,
        },
      },
    },
    async (request, reply) => {
      const result = await pay(ctx, request.bot!.id, request.body, request.headers['idempotency-key']);
      return reply.status(result.statusCode).send(result.body);
    },
  );

  app.get<{ Params: Static<typeof PaymentParams> }>(
    '/api/v1/bot/x402/payments/:payment_id',
    {
      schema: {
        tags: ['bot'],
        summary:
          'Poll an x402 payment (pending, approved with the signed payment, denied, expired; settlement on chain)',
        security: BOT_SECURITY,
        params: PaymentParams,
        response: { 200: PaymentPoll, 400: ErrorBody, 401: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) =>
      paymentStatus(ctx, request.bot!.id, request.params.payment_id, (id) => settleIfDue(ctx, id)),
  );

  const tags = ['owner'];
  const security = OWNER_SECURITY;
  app.get<{ Params: Static<typeof BotParams>; Querystring: { refresh?: boolean } }>(
    '/api/v1/owner/bots/:bot_id/x402',
    {
      schema: {
        tags,
        security,
        summary: 'The partner wallet: address, balance read from the chain, limits and lists',
        params: BotParams,
        querystring: Type.Object({ refresh: Type.Optional(Type.Boolean()) }),
        response: { 200: Loose, 404: ErrorBody },
      },
    },
    async (request) => {
      if (request.query.refresh) {
        await getX402Wallet(ctx, request.owner!.id, request.params.bot_id);
        await reconcileWallet(ctx, request.params.bot_id).catch((err) =>
          ctx.logger.warn({ err }, 'could not read the partner wallet from the chain'),
        );
      }
      return getX402Wallet(ctx, request.owner!.id, request.params.bot_id);
    },
  );

  app.patch<{ Params: Static<typeof BotParams>; Body: Static<typeof OwnerSettingsBody> }>(
    '/api/v1/owner/bots/:bot_id/x402',
    {
      schema: {
        tags,
        security,
        summary: 'Set the partner wallet limits, approval mode and pay-to / domain lists',
        params: BotParams,
        body: OwnerSettingsBody,
        response: { 200: Loose, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => updateX402Settings(ctx, request.owner!.id, request.params.bot_id, request.body),
  );

  app.get<{ Params: Static<typeof BotParams>; Querystring: { limit?: number } }>(
    '/api/v1/owner/bots/:bot_id/x402/payments',
    {
      schema: {
        tags,
        security,
        summary: 'x402 payments of a bot, newest first, with their on-chain transaction hashes',
        params: BotParams,
        querystring: Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200 })) }),
        response: { 200: Loose, 404: ErrorBody },
      },
    },
    async (request) => listX402Payments(ctx, request.owner!.id, request.params.bot_id, request.query.limit),
  );
}
