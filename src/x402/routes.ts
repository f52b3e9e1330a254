import type { Static } from '@sinclair/typebox';
import { BOT_SECURITY, OWNER_SECURITY, type App } from '../platform/http.ts';
import { settleIfDue } from '../spend/holds.ts';
import { botOf } from '../bots/auth.ts';
import { ownerOf } from '../owners/auth.ts';
import { BotParams } from '../owners/schemas.ts';
import type { AppContext } from '../platform/context.ts';
import { ErrorBody, RateLimitedBody } from '../platform/schemas.ts';
import { getX402Wallet, listX402Payments, updateX402Settings } from './owner.ts';
import { reconcileWallet } from './reconcile.ts';
import { fetchResource } from './fetch.ts';
import { reportRefusal } from './refusal.ts';
import { pay, paymentStatus } from './service.ts';
import {
  FetchAnswer,
  FetchBody,
  RefusalAnswer,
  RefusalBody,
  OwnerPayments,
  OwnerSettingsBody,
  OwnerWallet,
  PayApproved,
  PayBody,
  PayHeaders,
  PaymentParams,
  PaymentPoll,
  PaymentsQuery,
  PayPending,
  WalletQuery,
} from './schemas.ts';

// Bot: POST /api/v1/bot/x402/pay (sign mode), POST /api/v1/bot/x402/fetch (the service makes the
// request: src/x402/fetch.ts), GET /api/v1/bot/x402/payments/{payment_id} and POST …/refusal.
// Owner: GET / PATCH /api/v1/owner/bots/{bot_id}/x402 and GET …/x402/payments. Turning the rail on
// is PUT /api/v1/owner/bots/{bot_id}/rails/partner_wallet (src/owners/routes.ts → wallet.ts).

export async function registerX402Routes(app: App, ctx: AppContext): Promise<void> {
  app.post(
    '/api/v1/bot/x402/pay',
    {
      schema: {
        tags: ['bot'],
        summary:
          'Pay an HTTP 402 (x402) resource from the partner wallet (guardrail chain; approved, held or refused)',
        description:
          'Send the payment requirements the 402 response carried (its `accepts` list, x402 v2 or v1, or one entry of it) and the resource URL. ' +
          "The signed payment goes to the bot, which sends it to the seller itself: the service cannot see where, so the owner's domain lists are judged by requesting the named resource and paying only what its 402 asks for (see POST /api/v1/bot/x402/fetch, where the service makes the request). " +
          'Approved: the signed payment and `payment_header`, the value of the header named `payment_header_name` (PAYMENT-SIGNATURE, or X-PAYMENT for a v1 seller) for the retried request. ' +
          'Held: 202 with `expires_at`; poll GET /api/v1/bot/x402/payments/{payment_id}. ' +
          'Amounts are atomic USDC units (6 decimals, 1 = $0.000001): any whole number of them, e.g. "1000" for $0.001. ' +
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
      const result = await pay(ctx, botOf(request).id, request.body, request.headers['idempotency-key']);
      // The body is built by service.ts (or replayed from the idempotency row) in these shapes.
      const body = result.body as Static<typeof PayApproved> & Static<typeof PayPending>;
      return reply.status(result.statusCode).send(body);
    },
  );

  app.post(
    '/api/v1/bot/x402/fetch',
    {
      schema: {
        tags: ['bot'],
        summary:
          'Request an x402 resource through the service: it makes the request, pays a 402 under the guardrails and returns the resource',
        description:
          'The service sends the request (the webhook SSRF rules apply; redirects are returned, not followed). ' +
          "A 402 answer is paid from the partner wallet with the domain the service connected to and the payee its own request was asked for, so the owner's domain and pay-to lists bind; the request is then repeated with the payment and the answer returned (`response`, the body as `body_text` or `body_base64`). " +
          'Held for the owner: 202; once approved, send the same request with `payment_id`. ' +
          'A seller that refuses the payment: the service checks the authorisation against the chain and releases it at once when it can never be used (`payment.payment_status` refused). ' +
          'Send an Idempotency-Key header: a retry gets the first answer again and pays once.',
        security: BOT_SECURITY,
        headers: PayHeaders,
        body: FetchBody,
        response: {
          200: FetchAnswer,
          202: PayPending,
          400: ErrorBody,
          401: ErrorBody,
          402: ErrorBody,
          403: ErrorBody,
          404: ErrorBody,
          409: ErrorBody,
          429: RateLimitedBody,
          502: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const result = await fetchResource(
        ctx,
        botOf(request).id,
        request.body,
        request.headers['idempotency-key'],
      );
      if (result.statusCode === 202) {
        return reply.status(202).send(result.body as Static<typeof PayPending>);
      }
      return reply.status(200).send(result.body);
    },
  );

  app.post(
    '/api/v1/bot/x402/payments/:payment_id/refusal',
    {
      schema: {
        tags: ['bot'],
        summary: 'Report that the seller refused a signed payment (the service checks it against the chain)',
        description:
          "Sent by the SDK's x402 clients when the seller answers the paid request with a refusal. " +
          'The report is not taken on trust: the service runs the reference facilitator verification against the chain and releases the payment at once only when the authorisation can never be used (`released`); otherwise its amount stays reserved until it settles or lapses.',
        security: BOT_SECURITY,
        params: PaymentParams,
        body: RefusalBody,
        response: {
          200: RefusalAnswer,
          400: ErrorBody,
          401: ErrorBody,
          404: ErrorBody,
          429: RateLimitedBody,
        },
      },
    },
    async (request) => {
      const botId = botOf(request).id;
      const checked = await reportRefusal(ctx, botId, request.params.payment_id, request.body.reason ?? null);
      const poll = await paymentStatus(ctx, botId, request.params.payment_id, (id) => settleIfDue(ctx, id));
      return { ...poll, released: checked.released };
    },
  );

  app.get(
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
      paymentStatus(ctx, botOf(request).id, request.params.payment_id, (id) => settleIfDue(ctx, id)),
  );

  const tags = ['owner'];
  const security = OWNER_SECURITY;
  app.get(
    '/api/v1/owner/bots/:bot_id/x402',
    {
      schema: {
        tags,
        security,
        summary: 'The partner wallet: address, balance read from the chain, limits and lists',
        params: BotParams,
        querystring: WalletQuery,
        response: { 200: OwnerWallet, 404: ErrorBody },
      },
    },
    async (request) => {
      if (request.query.refresh) {
        await getX402Wallet(ctx, ownerOf(request).id, request.params.bot_id);
        await reconcileWallet(ctx, request.params.bot_id).catch((err) =>
          ctx.logger.warn({ err }, 'could not read the partner wallet from the chain'),
        );
      }
      return getX402Wallet(ctx, ownerOf(request).id, request.params.bot_id);
    },
  );

  app.patch(
    '/api/v1/owner/bots/:bot_id/x402',
    {
      schema: {
        tags,
        security,
        summary: 'Set the partner wallet limits, approval mode and pay-to / domain lists',
        params: BotParams,
        body: OwnerSettingsBody,
        response: { 200: OwnerWallet, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => updateX402Settings(ctx, ownerOf(request).id, request.params.bot_id, request.body),
  );

  app.get(
    '/api/v1/owner/bots/:bot_id/x402/payments',
    {
      schema: {
        tags,
        security,
        summary: 'x402 payments of a bot, newest first, with their on-chain transaction hashes',
        params: BotParams,
        querystring: PaymentsQuery,
        response: { 200: OwnerPayments, 404: ErrorBody },
      },
    },
    async (request) => listX402Payments(ctx, ownerOf(request).id, request.params.bot_id, request.query.limit),
  );
}
