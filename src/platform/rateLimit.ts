import type { Queryable } from './db/port.ts';
import { ApiError } from './errors.ts';

// Sliding-window rate limits kept in the database, so every instance shares them. The check and
// the hit run in the caller's transaction behind a per-key advisory lock (rate_limit_consume,
// migration 0009): two instances cannot both see "2 of 3 used" and both let a request through. Call it in the same transaction as the work
// being counted, so a request that is rejected for another reason is not counted.

export type RateLimitResult = { ok: true } | { ok: false; retryAfterSeconds: number };

export async function consumeRateLimit(
  tx: Queryable,
  options: { key: string; limit: number; windowSeconds: number; now: number },
): Promise<RateLimitResult> {
  // One round trip: lock, count and insert run in rate_limit_consume (migration 0009).
  const rows = await tx.query<{ retry: number }>('SELECT rate_limit_consume($1, $2, $3, $4) AS retry', [
    options.key,
    options.limit,
    options.windowSeconds,
    new Date(options.now),
  ]);
  const retry = Number(rows[0]?.retry ?? 0);
  return retry === 0 ? { ok: true } : { ok: false, retryAfterSeconds: retry };
}

/** Deletes hits older than the longest window; run from a periodic job. */
export async function pruneRateLimitHits(
  db: Queryable,
  now: number,
  maxWindowSeconds = 86_400,
): Promise<void> {
  await db.query('DELETE FROM rate_limit_hits WHERE at < $1', [new Date(now - maxWindowSeconds * 1000)]);
}

/** The 429 of every rate limit: `rate_limited` with `retry_after_seconds`. */
export function rateLimited(retryAfterSeconds: number, message: string): ApiError {
  return new ApiError('rate_limited', message, { retry_after_seconds: retryAfterSeconds });
}

/** The usual message: "Too many <what>; retry after N seconds." */
export function tooMany(retryAfterSeconds: number, what: string): ApiError {
  return rateLimited(retryAfterSeconds, `Too many ${what}; retry after ${retryAfterSeconds} seconds.`);
}
