import { Type } from '@sinclair/typebox';
import type { App } from '../app.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import { ErrorBody, IdParam } from '../platform/schemas.ts';
import { createNamedOwnerToken, listOwnerTokens, revokeOwnerToken } from './tokens.ts';

// /api/v1/owner/tokens: the owner's API tokens. Creating one needs a signed-in owner (the
// dashboard session, with its CSRF token): a leaked bearer token must not be able to mint
// successors that outlive its revocation. Listing and revoking work with either.

const TokenView = Type.Object({
  token_id: Type.String(),
  name: Type.String(),
  token_prefix: Type.String(),
  created_at: Type.String(),
  last_used_at: Type.Union([Type.String(), Type.Null()]),
});

export const TokenName = Type.String({
  minLength: 1,
  maxLength: 100,
  pattern: '^[^\\x00-\\x1f\\x7f]*\\S[^\\x00-\\x1f\\x7f]*$',
});

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
        response: { 200: Type.Object({ tokens: Type.Array(TokenView) }) },
      },
    },
    async (request) => ({ tokens: await listOwnerTokens(ctx.db, request.owner!.id) }),
  );

  app.post<{ Body: { name: string } }>(
    '/api/v1/owner/tokens',
    {
      schema: {
        tags,
        security,
        summary: 'Create a named owner API token (signed-in owner only; the token is shown once)',
        body: Type.Object({ name: TokenName }),
        response: {
          201: Type.Composite([TokenView, Type.Object({ token: Type.String() })]),
          400: ErrorBody,
          403: ErrorBody,
          409: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      if (request.owner!.via !== 'session') {
        throw new ApiError(
          'forbidden',
          'New owner tokens are created by a signed-in owner (dashboard Settings, or botpay owner token create), not with another token.',
        );
      }
      return reply.status(201).send(await createNamedOwnerToken(ctx, request.owner!.id, request.body.name));
    },
  );

  app.delete<{ Params: { token_id: string } }>(
    '/api/v1/owner/tokens/:token_id',
    {
      schema: {
        tags,
        security,
        summary: 'Revoke an owner API token (at once, on every instance)',
        params: Type.Object({ token_id: IdParam('otk') }),
        response: {
          200: Type.Object({ token_id: Type.String(), revoked_at: Type.String() }),
          404: ErrorBody,
        },
      },
    },
    async (request) => revokeOwnerToken(ctx, request.owner!.id, request.params.token_id),
  );
}
