import { type Static, Type } from '@sinclair/typebox';
import type { App } from '../app.ts';
import type { AppContext } from '../platform/context.ts';
import { authenticationRequired, validationError } from '../platform/errors.ts';
import { setPartnerRail } from '../x402/wallet.ts';
import { ErrorBody, IdParam } from '../platform/schemas.ts';
import { authenticateOwnerToken, type OwnerAuthenticator } from './auth.ts';
import { registerOwnerTokenRoutes } from './tokenRoutes.ts';
import {
  claimBot,
  createPairingCode,
  fundBot,
  getBot,
  getMasterGuardrails,
  listAudit,
  listBots,
  listTransactions,
  rotateApiKey,
  rotateWebhookSecret,
  setRail,
  setWalletFrozen,
  updateMasterGuardrails,
} from './service.ts';

export const OWNER_SECURITY = [{ ownerToken: [] }];
const Cents = (max: number) => Type.Integer({ minimum: 0, maximum: max });
export const BotParams = Type.Object({ bot_id: IdParam('bot') });
type BotParamsT = Static<typeof BotParams>;
const Loose = Type.Object({}, { additionalProperties: true });
const Page = Type.Object({
  limit: Type.Optional(Type.String({ pattern: '^[0-9]{1,3}$' })),
  before: Type.Optional(Type.String({ format: 'date-time', maxLength: 40 })),
});

function pageLimit(raw: string | undefined): number {
  const n = raw === undefined ? 50 : Number(raw);
  return Math.min(Math.max(n, 1), 200);
}

export async function registerOwnerRoutes(app: App, ctx: AppContext): Promise<void> {
  // Session cookies (dashboard) register here; the bearer owner token is always accepted.
  const authenticators: OwnerAuthenticator[] = [];
  app.decorate('ownerAuthenticators', authenticators);

  app.addHook('onRequest', async (request) => {
    if (!request.url.startsWith('/api/v1/owner/')) return;
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
  });

  const tags = ['owner'];
  const security = OWNER_SECURITY;

  app.post<{ Body: { claim_token: string } }>(
    '/api/v1/owner/claims',
    {
      schema: {
        tags,
        security,
        summary: 'Claim a bot with its claim token',
        body: Type.Object({ claim_token: Type.String({ minLength: 1, maxLength: 200 }) }),
        response: { 200: Type.Object({ bot_id: Type.String(), status: Type.String() }), 400: ErrorBody },
      },
    },
    async (request) => claimBot(ctx, request.owner!.id, request.body.claim_token),
  );

  app.post(
    '/api/v1/owner/pairing-codes',
    {
      schema: {
        tags,
        security,
        summary: 'Create a pairing code (6 digits, 1 hour, single use)',
        response: {
          201: Type.Object({ pairing_code: Type.String(), expires_at: Type.String() }),
          429: ErrorBody,
        },
      },
    },
    async (request, reply) => reply.status(201).send(await createPairingCode(ctx, request.owner!.id)),
  );

  app.get(
    '/api/v1/owner/bots',
    { schema: { tags, security, summary: "The owner's bots", response: { 200: Loose } } },
    async (request) => listBots(ctx, request.owner!.id),
  );

  app.get<{ Params: BotParamsT }>(
    '/api/v1/owner/bots/:bot_id',
    {
      schema: {
        tags,
        security,
        summary: 'One bot with wallet, rails and cards',
        params: BotParams,
        response: { 200: Loose, 404: ErrorBody },
      },
    },
    async (request) => getBot(ctx, request.owner!.id, request.params.bot_id),
  );

  app.post<{ Params: BotParamsT; Body: { amount_cents: number } }>(
    '/api/v1/owner/bots/:bot_id/wallet/fund',
    {
      schema: {
        tags,
        security,
        summary: 'Add funds to the wallet (emits wallet.funded)',
        params: BotParams,
        body: Type.Object({ amount_cents: Type.Integer({ minimum: 1, maximum: 1_000_000 }) }),
        response: { 200: Loose, 404: ErrorBody },
      },
    },
    async (request) => fundBot(ctx, request.owner!.id, request.params.bot_id, request.body.amount_cents),
  );

  for (const [action, frozen] of [
    ['freeze', true],
    ['unfreeze', false],
  ] as const) {
    app.post<{ Params: BotParamsT }>(
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
            200: Type.Object({ bot_id: Type.String(), wallet_status: Type.String() }),
            404: ErrorBody,
          },
        },
      },
      async (request) => setWalletFrozen(ctx, request.owner!.id, request.params.bot_id, frozen),
    );
  }

  app.put<{
    Params: BotParamsT & { rail_key: 'card_wallet' | 'partner_wallet' };
    Body: { status: 'active' | 'inactive'; address?: string; private_key?: string };
  }>(
    '/api/v1/owner/bots/:bot_id/rails/:rail_key',
    {
      schema: {
        tags,
        security,
        summary: 'Activate or deactivate a payment rail (emits rails.updated)',
        description:
          "partner_wallet (docs/x402.md): turning it on creates the bot's USDC wallet (a new key pair, encrypted with SECRET_KEY) " +
          "or imports the one in private_key; its address is in the response and in the bot's status. Needs X402_NETWORK (409 rail_not_configured otherwise).",
        params: Type.Object({
          bot_id: IdParam('bot'),
          rail_key: Type.Union([Type.Literal('card_wallet'), Type.Literal('partner_wallet')]),
        }),
        body: Type.Object({
          status: Type.Union([Type.Literal('active'), Type.Literal('inactive')]),
          address: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: '^[\\x21-\\x7e]+$' })),
          private_key: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
        }),
        response: { 200: Loose, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
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
          request.owner!.id,
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
        request.owner!.id,
        request.params.bot_id,
        request.params.rail_key,
        request.body.status,
        request.body.address,
      );
    },
  );

  app.get(
    '/api/v1/owner/guardrails',
    { schema: { tags, security, summary: 'Master guardrails and what is spent', response: { 200: Loose } } },
    async (request) => getMasterGuardrails(ctx.db, request.owner!.id, ctx.clock.now()),
  );

  app.put<{
    Body: { per_transaction_cents?: number; daily_budget_cents?: number; monthly_budget_cents?: number };
  }>(
    '/api/v1/owner/guardrails',
    {
      schema: {
        tags,
        security,
        summary: 'Set master guardrails (cap real-money spending across all bots)',
        body: Type.Object(
          {
            per_transaction_cents: Type.Optional(Cents(100_000_000)),
            daily_budget_cents: Type.Optional(Cents(100_000_000)),
            monthly_budget_cents: Type.Optional(Cents(1_000_000_000)),
          },
          { minProperties: 1 },
        ),
        response: { 200: Loose, 400: ErrorBody },
      },
    },
    async (request) => updateMasterGuardrails(ctx, request.owner!.id, request.body),
  );

  app.get<{ Params: BotParamsT; Querystring: Static<typeof Page> }>(
    '/api/v1/owner/bots/:bot_id/transactions',
    {
      schema: {
        tags,
        security,
        summary: 'Ledger view of the wallet',
        params: BotParams,
        querystring: Page,
        response: { 200: Loose, 404: ErrorBody },
      },
    },
    async (request) =>
      listTransactions(
        ctx,
        request.owner!.id,
        request.params.bot_id,
        pageLimit(request.query.limit),
        request.query.before,
      ),
  );

  app.get<{ Params: BotParamsT; Querystring: Static<typeof Page> }>(
    '/api/v1/owner/bots/:bot_id/audit-log',
    {
      schema: {
        tags,
        security,
        summary: 'Owner actions on this bot',
        params: BotParams,
        querystring: Page,
        response: { 200: Loose, 404: ErrorBody },
      },
    },
    async (request) =>
      listAudit(ctx, request.owner!.id, request.params.bot_id, pageLimit(request.query.limit)),
  );

  app.post<{ Params: BotParamsT }>(
    '/api/v1/owner/bots/:bot_id/api-key/rotate',
    {
      schema: {
        tags,
        security,
        summary: 'Issue a new API key (shown once)',
        params: BotParams,
        response: { 200: Loose, 404: ErrorBody },
      },
    },
    async (request) => {
      const result = await rotateApiKey(ctx, request.owner!.id, request.params.bot_id);
      app.botAuthenticator.forgetBot(request.params.bot_id);
      return result;
    },
  );

  app.post<{ Params: BotParamsT }>(
    '/api/v1/owner/bots/:bot_id/webhook-secret/rotate',
    {
      schema: {
        tags,
        security,
        summary: 'Issue a new webhook secret (shown once)',
        params: BotParams,
        response: { 200: Loose, 404: ErrorBody },
      },
    },
    async (request) => rotateWebhookSecret(ctx, request.owner!.id, request.params.bot_id),
  );

  registerOwnerTokenRoutes(app, ctx, security);
}

declare module 'fastify' {
  interface FastifyInstance {
    ownerAuthenticators: OwnerAuthenticator[];
  }
}
