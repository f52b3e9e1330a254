import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type {
  FastifyBaseLogger,
  FastifyInstance,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify';

/**
 * The Fastify instance every module registers its routes on (TypeBox type provider: a route's
 * request and reply types come from its schemas). Here rather than in `app.ts`, so a module's
 * routes do not import the factory that imports them.
 */
export type App = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** OpenAPI security of the bot API (`Authorization: Bearer <api key>`, checked in `bots/routes.ts`). */
export const BOT_SECURITY = [{ botKey: [] }];
/** OpenAPI security of the owner API (owner token or dashboard session, checked in `owners/routes.ts`). */
export const OWNER_SECURITY = [{ ownerToken: [] }];
