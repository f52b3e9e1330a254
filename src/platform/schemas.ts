import { Type } from '@sinclair/typebox';

// Shared response schemas for the OpenAPI document. Additional properties are allowed so that
// limit details (limit_usd, remaining_usd, field…) are serialised rather than stripped.
export const ErrorBody = Type.Object(
  { error: Type.String(), message: Type.Optional(Type.String()) },
  { additionalProperties: true },
);

export const RateLimitedBody = Type.Object(
  { error: Type.Literal('rate_limited'), message: Type.String(), retry_after_seconds: Type.Integer() },
  { additionalProperties: true },
);

/**
 * `limit` of a paged list, in a query string: an integer (`?limit=5`; query strings are coerced by
 * their declared types, src/app.ts), 1 to 200; without it, DEFAULT_PAGE_LIMIT.
 */
export const PageLimit = Type.Integer({ minimum: 1, maximum: 200, description: '1 to 200 (default 50).' });
export const DEFAULT_PAGE_LIMIT = 50;

/**
 * The Idempotency-Key header of an owner call that moves money or decides (owners/idempotency.ts):
 * the same key and request replay the first answer for 24 hours; another request is 409.
 */
export const IdempotencyHeaders = Type.Object({
  'idempotency-key': Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 255,
      description:
        'Makes a retry safe: the same key with the same request replays the first answer (24 hours); with another request it is 409 idempotency_conflict.',
    }),
  ),
});

/** A path parameter holding one of our prefixed ids. */
export const IdParam = (prefix: string) =>
  Type.String({ pattern: `^${prefix}_[a-z2-7]{1,64}$`, maxLength: 80 });
