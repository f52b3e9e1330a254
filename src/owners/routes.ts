import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../platform/context.ts';
import { authenticationRequired, validationError } from '../platform/errors.ts';
import { type App, OWNER_SECURITY } from '../platform/http.ts';
import { DEFAULT_PAGE_LIMIT, ErrorBody, IdempotencyHeaders } from '../platform/schemas.ts';
import { setPartnerRail } from '../x402/wallet.ts';
import { listAudit } from './audit.ts';
import { authenticateOwnerToken, type OwnerAuthenticator, ownerOf } from './auth.ts';
import { claimBot, createPairingCode, getBot, listBots } from './bots.ts';
import { fundBot, listTransactions, setRail, setWalletFrozen } from './funding.ts';
import { getMasterGuardrails, updateMasterGuardrails } from './guardrails.ts';
import { rotateApiKey, rotateWebhookSecret } from './keys.ts';
import { centsToMicros } from '../platform/money.ts';
import {
  ApiKeyRotated,
  AuditList,
  BotParams,
  ClaimBody,
  ClaimResponse,
  FrozenResponse,
  FundBody,
  FundResponse,
  Guardrails,
  GuardrailsBody,
  OwnerBotDetail,
  OwnerBotList,
  Page,
  PairingCodeResponse,
  RailBody,
  RailParams,
  RailResponse,
  TransactionList,
  WebhookSecretRotated,
} from './schemas.ts';
import { registerOwnerTokenRoutes } from './tokenRoutes.ts';

export async function registerOwnerRoutes(app: App, ctx: AppContext): Promise<void> {
  // Session cookies (dashboard) register here; the bearer owner token is always accepted.
  const authenticators: OwnerAuthenticator[] = [];
  app.decorate('ownerAuthenticators', authenticators);

  const authenticateOwner = async (request: FastifyRequest): Promise<void> => {
    for (const authenticate of authenticators) {
      const owner = await authenticate(request);
      if (owner) {
        request.owner = owner;
        return;
      }
    }
    const owner = await authenticateOwnerToken(ctx, request);
    if (!owner) throw authenticationRequired();
    request.owner = owner;
  };
  // Callback style: this hook runs on every request, and all but owner API calls leave at once
  // (an async hook would cost every bot request a promise and a microtask turn).
  app.addHook('onRequest', (request, _reply, done) => {
    if (!request.url.startsWith('/api/v1/owner/')) return done();
    authenticateOwner(request).then(() => done(), done);
  });

  const tags = ['owner'];
  const security = OWNER_SECURITY;

  app.post(
    '/api/v1/owner/claims',
    {
      schema: {
        tags,
        security,
        summary: 'Claim a bot with its claim token',
        body: ClaimBody,
        response: { 200: ClaimResponse, 400: ErrorBody },
      },
    },
    async (request) => claimBot(ctx, ownerOf(request).id, request.body.claim_token),
  );

  app.post(
    '/api/v1/owner/pairing-codes',
    {
      schema: {
        tags,
        security,
        summary: 'Create a pairing code (6 digits, 1 hour, single use)',
        response: {
          201: PairingCodeResponse,
          429: ErrorBody,
        },
      },
    },
    async (request, reply) => reply.status(201).send(await createPairingCode(ctx, ownerOf(request).id)),
  );

  app.get(
    '/api/v1/owner/bots',
    { schema: { tags, security, summary: "The owner's bots", response: { 200: OwnerBotList } } },
    async (request) => listBots(ctx, ownerOf(request).id),
  );

  app.get(
    '/api/v1/owner/bots/:bot_id',
    {
      schema: {
        tags,
        security,
        summary: 'One bot with wallet, rails and cards',
        params: BotParams,
        response: { 200: OwnerBotDetail, 404: ErrorBody },
      },
    },
    async (request) => getBot(ctx, ownerOf(request).id, request.params.bot_id),
  );

  app.post(
    '/api/v1/owner/bots/:bot_id/wallet/fund',
    {
      schema: {
        tags,
        security,
        summary: 'Add funds to the wallet (emits wallet.funded)',
        description:
          'Send an Idempotency-Key header to make retries safe: a retry with the same key and amount answers the first funding again instead of funding twice.',
        params: BotParams,
        headers: IdempotencyHeaders,
        body: FundBody,
        response: { 200: FundResponse, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request) =>
      fundBot(
        ctx,
        ownerOf(request).id,
        request.params.bot_id,
        centsToMicros(request.body.amount_cents),
        request.headers['idempotency-key'],
      ),
  );

  for (const [action, frozen] of [
    ['freeze', true],
    ['unfreeze', false],
  ] as const) {
    app.post(
      `/api/v1/owner/bots/:bot_id/wallet/${action}`,
      {
        schema: {
          tags,
          security,
          summary: frozen
            ? 'Freeze the wallet (emits wallet.frozen)'
            : 'Unfreeze the wallet (emits wallet.unfrozen)',
          params: BotParams,
          response: {
            200: FrozenResponse,
            404: ErrorBody,
          },
        },
      },
      async (request) => setWalletFrozen(ctx, ownerOf(request).id, request.params.bot_id, frozen),
    );
  }

  app.put(
    '/api/v1/owner/bots/:bot_id/rails/:rail_key',
    {
      schema: {
        tags,
        security,
        summary: 'Activate or deactivate a payment rail (emits rails.updated)',
        description:
          "partner_wallet (docs/x402.md): turning it on creates the bot's USDC wallet (a new key pair, encrypted with SECRET_KEY) " +
          "or imports the one in private_key; its address is in the response and in the bot's status. Needs X402_NETWORK (409 rail_not_configured otherwise).",
        params: RailParams,
        body: RailBody,
        response: { 200: RailResponse, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request) => {
      if (request.params.rail_key === 'partner_wallet') {
        if (request.body.address !== undefined) {
          throw validationError(
            'The partner wallet address comes from its key: turn the rail on to create one, or import a key with private_key.',
            { field: 'address' },
          );
        }
        return setPartnerRail(
          ctx,
          ownerOf(request).id,
          request.params.bot_id,
          request.body.status,
          request.body.private_key,
        );
      }
      if (request.body.private_key !== undefined) {
        throw validationError('private_key is only for the partner_wallet rail.', { field: 'private_key' });
      }
      return setRail(
        ctx,
        ownerOf(request).id,
        request.params.bot_id,
        request.params.rail_key,
        request.body.status,
        request.body.address,
      );
    },
  );

  app.get(
    '/api/v1/owner/guardrails',
    {
      schema: {
        tags,
        security,
        summary: 'Master guardrails and what is spent',
        response: { 200: Guardrails },
      },
    },
    async (request) => getMasterGuardrails(ctx.db, ownerOf(request).id, ctx.clock.now()),
  );

  app.put(
    '/api/v1/owner/guardrails',
    {
      schema: {
        tags,
        security,
        summary: 'Set master guardrails (cap real-money spending across all bots)',
        body: GuardrailsBody,
        response: { 200: Guardrails, 400: ErrorBody },
      },
    },
    async (request) => updateMasterGuardrails(ctx, ownerOf(request).id, request.body),
  );

  app.get(
    '/api/v1/owner/bots/:bot_id/transactions',
    {
      schema: {
        tags,
        security,
        summary: 'Ledger view of the wallet',
        params: BotParams,
        querystring: Page,
        response: { 200: TransactionList, 404: ErrorBody },
      },
    },
    async (request) =>
      listTransactions(
        ctx,
        ownerOf(request).id,
        request.params.bot_id,
        request.query.limit ?? DEFAULT_PAGE_LIMIT,
        request.query.before,
      ),
  );

  app.get(
    '/api/v1/owner/bots/:bot_id/audit-log',
    {
      schema: {
        tags,
        security,
        summary: 'Owner actions on this bot',
        params: BotParams,
        querystring: Page,
        response: { 200: AuditList, 404: ErrorBody },
      },
    },
    async (request) =>
      listAudit(ctx, ownerOf(request).id, request.params.bot_id, request.query.limit ?? DEFAULT_PAGE_LIMIT),
  );

  app.post(
    '/api/v1/owner/bots/:bot_id/api-key/rotate',
    {
      schema: {
        tags,
        security,
        summary: 'Issue a new API key (shown once)',
        params: BotParams,
        response: { 200: ApiKeyRotated, 404: ErrorBody },
      },
    },
    async (request) => {
      const result = await rotateApiKey(ctx, ownerOf(request).id, request.params.bot_id);
      app.botAuthenticator.forgetBot(request.params.bot_id);
      return result;
    },
  );

  app.post(
    '/api/v1/owner/bots/:bot_id/webhook-secret/rotate',
    {
      schema: {
        tags,
        security,
        summary: 'Issue a new webhook secret (shown once)',
        params: BotParams,
        response: { 200: WebhookSecretRotated, 404: ErrorBody },
      },
    },
    async (request) => rotateWebhookSecret(ctx, ownerOf(request).id, request.params.bot_id),
  );

  registerOwnerTokenRoutes(app, ctx, security);
}

declare module 'fastify' {
  interface FastifyInstance {
    ownerAuthenticators: OwnerAuthenticator[];
  }
}
