import type { Queryable } from './db/port.ts';

// Sliding-window rate limits kept in the database, so every instance shares them. The check and
// the hit run in the caller's transaction behind a per-key advisory lock: two instances cannot both
// see "2 of 3 used" and both let a request through. Call it in the same transaction as the work
// being counted, so a request that is rejected for another reason is not counted.

export type RateLimitResult = { ok: true } | { ok: false; retryAfterSeconds: number };

export async function consumeRateLimit(
  tx: Queryable,
  options: { key: string; limit: number; windowSeconds: number; now: number },
): Promise<RateLimitResult> {
  const { key, limit, windowSeconds, now } = options;
  const windowStart = new Date(now - windowSeconds * 1000);
  await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`ratelimit:${key}`]);
  const rows = await tx.query<{ n: number; oldest: Date | null }>(
    `SELECT count(*)::int AS n, min(at) AS oldest
       FROM (SELECT at FROM rate_limit_hits WHERE key = $1 AND at > $2 ORDER BY at DESC LIMIT $3) recent`,
    [key, windowStart, limit],
  );
  const n = rows[0]?.n ?? 0;
  if (n >= limit) {
    // The window frees when the oldest of the last `limit` hits leaves it.
    const oldest = rows[0]?.oldest ? new Date(rows[0].oldest).getTime() : now;
    const retryAfterSeconds = Math.max(1, Math.ceil((oldest + windowSeconds * 1000 - now) / 1000));
    return { ok: false, retryAfterSeconds };
  }
  await tx.query('INSERT INTO rate_limit_hits (key, at) VALUES ($1, $2)', [key, new Date(now)]);
  return { ok: true };
}

/** Deletes hits older than the longest window; run from a periodic job. */
export async function pruneRateLimitHits(
  db: Queryable,
  now: number,
  maxWindowSeconds = 86_400,
): Promise<void> {
  await db.query('DELETE FROM rate_limit_hits WHERE at < $1', [new Date(now - maxWindowSeconds * 1000)]);
}
