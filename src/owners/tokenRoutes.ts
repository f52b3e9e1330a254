import type { App } from '../platform/http.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import { ErrorBody } from '../platform/schemas.ts';
import { ownerOf } from './auth.ts';
import { TokenBody, TokenCreated, TokenList, TokenParams, TokenRevoked } from './schemas.ts';
import { createNamedOwnerToken, listOwnerTokens, revokeOwnerToken } from './tokens.ts';

// /api/v1/owner/tokens: the owner's API tokens. Creating one needs a signed-in owner (the
// dashboard session, with its CSRF token): a leaked bearer token must not be able to mint
// successors that outlive its revocation. Listing and revoking work with either.

export function registerOwnerTokenRoutes(
  app: App,
  ctx: AppContext,
  security: Array<Record<string, string[]>>,
): void {
  const tags = ['owner'];

  app.get(
    '/api/v1/owner/tokens',
    {
      schema: {
        tags,
        security,
        summary: 'Your active owner API tokens (name, prefix, created, last used; never the token)',
        response: { 200: TokenList },
      },
    },
    async (request) => ({ tokens: await listOwnerTokens(ctx.db, ownerOf(request).id) }),
  );

  app.post(
    '/api/v1/owner/tokens',
    {
      schema: {
        tags,
        security,
        summary: 'Create a named owner API token (signed-in owner only; the token is shown once)',
        body: TokenBody,
        response: {
          201: TokenCreated,
          400: ErrorBody,
          403: ErrorBody,
          409: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      if (ownerOf(request).via !== 'session') {
        throw new ApiError(
          'forbidden',
          'New owner tokens are created by a signed-in owner (dashboard Settings, or botpay owner token create), not with another token.',
        );
      }
      return reply.status(201).send(await createNamedOwnerToken(ctx, ownerOf(request).id, request.body.name));
    },
  );

  app.delete(
    '/api/v1/owner/tokens/:token_id',
    {
      schema: {
        tags,
        security,
        summary: 'Revoke an owner API token (at once, on every instance)',
        params: TokenParams,
        response: {
          200: TokenRevoked,
          404: ErrorBody,
        },
      },
    },
    async (request) => revokeOwnerToken(ctx, ownerOf(request).id, request.params.token_id),
  );
}
