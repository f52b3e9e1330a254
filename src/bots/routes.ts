import type { AppContext } from '../platform/context.ts';
import { type App, BOT_SECURITY } from '../platform/http.ts';
import { ErrorBody, RateLimitedBody } from '../platform/schemas.ts';
import type { FastifyReply } from 'fastify';
import { type AuthenticatedBot, botOf, createBotAuthenticator } from './auth.ts';
import { registerBot } from './register.ts';
import {
  RegistrationBody,
  RegistrationResponse,
  StatusResponse,
  type StatusResponseT,
  WalletCheckResponse,
  type WalletCheckResponseT,
} from './schemas.ts';
import { type Compute, createBotStateCache } from './stateCache.ts';
import { computeStatus, computeWallet } from './status.ts';

/** What Fastify sends for a serialised JSON answer. */
const JSON_TYPE = 'application/json; charset=utf-8';

export async function registerBotRoutes(app: App, ctx: AppContext): Promise<void> {
  const authenticator = createBotAuthenticator(ctx);
  app.decorate('botAuthenticator', authenticator);
  const unlistenKeys = await authenticator.ready;
  const stateCache = await createBotStateCache(ctx);
  app.addHook('onClose', async () => {
    await unlistenKeys();
    await stateCache.stop();
  });

  // Every path under /api/v1/bot/ needs the bot's API key; checked once here for all of them,
  // including routes other modules add, so none can forget it.
  // Callback style: a cached key answers without a promise (this hook runs on every request).
  app.addHook('onRequest', (request, _reply, done) => {
    if (!request.url.startsWith('/api/v1/bot/')) return done();
    let cached: AuthenticatedBot | undefined;
    try {
      cached = authenticator.cached(request);
    } catch (error) {
      return done(error as Error);
    }
    if (cached) {
      request.bot = cached;
      return done();
    }
    authenticator.authenticate(request).then((bot) => {
      request.bot = bot;
      done();
    }, done);
  });

  // Status and wallet check answer most requests from the state cache without a promise: a fresh
  // entry is sent as JSON text made once per entry by the route's own serializer (the response
  // schema), so a cached answer costs neither an await nor a serialisation per request.
  const loadStatus: Compute<StatusResponseT> = (botId) => computeStatus(ctx, botId);
  const loadWallet: Compute<WalletCheckResponseT> = (botId) => computeWallet(ctx, botId);
  function sendCached(reply: FastifyReply, kind: string, botId: string, compute: Compute<unknown>): boolean {
    const hit = stateCache.peek(kind, botId, compute);
    if (!hit) return false;
    const json = hit.json ?? reply.serialize(hit.value);
    if (typeof json === 'string') hit.json = json;
    reply.header('content-type', JSON_TYPE).send(json);
    return true;
  }

  app.post(
    '/api/v1/bots/register',
    {
      schema: {
        tags: ['bot'],
        summary: 'Register a bot (public)',
        security: [],
        body: RegistrationBody,
        response: { 201: RegistrationResponse, 400: ErrorBody, 409: ErrorBody, 429: RateLimitedBody },
      },
    },
    async (request, reply) => {
      const result = await registerBot(ctx, request.body, request.ip);
      return reply.status(201).send(result);
    },
  );

  app.get(
    '/api/v1/bot/status',
    {
      schema: {
        tags: ['bot'],
        summary: 'Bot status, rails and guardrails',
        security: BOT_SECURITY,
        response: { 200: StatusResponse, 401: ErrorBody },
      },
    },
    (request, reply) => {
      const botId = botOf(request).id;
      if (sendCached(reply, 'status', botId, loadStatus)) return;
      return stateCache.get('status', botId, loadStatus);
    },
  );

  app.get(
    '/api/v1/bot/wallet/check',
    {
      schema: {
        tags: ['bot'],
        summary: 'Wallet balance and spending limits',
        security: BOT_SECURITY,
        response: { 200: WalletCheckResponse, 401: ErrorBody },
      },
    },
    (request, reply) => {
      const botId = botOf(request).id;
      if (sendCached(reply, 'wallet', botId, loadWallet)) return;
      return stateCache.get('wallet', botId, loadWallet);
    },
  );
}

declare module 'fastify' {
  interface FastifyInstance {
    botAuthenticator: ReturnType<typeof createBotAuthenticator>;
  }
}
