import type { Queryable } from './db/port.ts';
import { ApiError } from './errors.ts';

// Sliding-window rate limits kept in the database, so every instance shares them: `limit` requests
// per key in any `windowSeconds` (a request counts from when it was made until windowSeconds
// later). The check and the hit run in the caller's transaction in one statement that locks the
// key's row in rate_limits (rate_limit_consume, src/migrations/functions/rate_limit_consume.sql):
// two instances cannot both see "2 of 3 used" and both let a request through. Call it in the same
// transaction as the work being counted, so a request that is rejected for another reason is not
// counted. A key is always used with the same window.

export type RateLimitResult = { ok: true } | { ok: false; retryAfterSeconds: number };

export async function consumeRateLimit(
  tx: Queryable,
  options: { key: string; limit: number; windowSeconds: number; now: number },
): Promise<RateLimitResult> {
  // One round trip: lock, count and the hit run in rate_limit_consume.
  const rows = await tx.query<{ retry: number }>('SELECT rate_limit_consume($1, $2, $3, $4) AS retry', [
    options.key,
    options.limit,
    options.windowSeconds,
    new Date(options.now),
  ]);
  const retry = Number(rows[0]?.retry ?? 0);
  return retry === 0 ? { ok: true } : { ok: false, retryAfterSeconds: retry };
}

/** Gives back one request of `key` counted at `now` (e.g. an attempt that turned out not to count). */
export async function releaseRateLimit(q: Queryable, key: string, now: number): Promise<void> {
  await q.query('SELECT rate_limit_release($1, $2)', [key, new Date(now)]);
}

/** The 429 of every rate limit: `rate_limited` with `retry_after_seconds`. */
export function rateLimited(retryAfterSeconds: number, message: string): ApiError {
  return new ApiError('rate_limited', message, { retry_after_seconds: retryAfterSeconds });
}

/** The usual message: "Too many <what>; retry after N seconds." */
export function tooMany(retryAfterSeconds: number, what: string): ApiError {
  return rateLimited(retryAfterSeconds, `Too many ${what}; retry after ${retryAfterSeconds} seconds.`);
}
