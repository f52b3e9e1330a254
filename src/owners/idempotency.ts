import { IDEMPOTENCY_TTL_MS } from '../spend/idempotency.ts';
import type { AppContext } from '../platform/context.ts';
import { sha256Hex } from '../platform/crypto.ts';
import { one, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';

// Idempotency-Key of the owner calls that move money or decide (docs/api.md): owner funding, top-up
// approval and decline, manual webhook retry. The same semantics as a checkout's key:
// - the same key with the same request replays the first successful answer (for 24 hours);
// - the same key with another request (another route, bot, amount…) is 409 idempotency_conflict;
// - concurrent calls with the same key make one change: the key row (table owner_idempotency,
//   migration 0029) is inserted first in the call's own transaction, so a second call waits on its
//   primary key until the first commits (then replays its answer) or rolls back (then runs);
// - a refused call (404, 409 not_pending…) keeps nothing: the key can be used again.
// Keys are the owner's own: two owners may use the same key.

/** What a keyed call is: the operation and what it was asked, compared as a hash. */
export interface OwnerRequest {
  ownerId: string;
  /** The Idempotency-Key header, or undefined for a call without one. */
  key: string | undefined;
  /** The operation, e.g. 'wallet.fund' (a key used for one operation conflicts with another). */
  operation: string;
  /** What the call was asked (path parameters and body), as JSON-able values. */
  request: Record<string, unknown>;
}

/** The request's hash: operation and request with object keys sorted (key order does not count). */
export function ownerRequestHash(operation: string, request: Record<string, unknown>): string {
  return sha256Hex(JSON.stringify([operation, sorted(request)]));
}

function sorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sorted);
  if (value === null || typeof value !== 'object') return value ?? null;
  return Object.fromEntries(
    Object.keys(value)
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .sort()
      .map((k) => [k, sorted((value as Record<string, unknown>)[k])]),
  );
}

/**
 * Runs `work` in one transaction behind the call's Idempotency-Key (without a key, just in one
 * transaction). `keep(result)` says whether the result is an answer to replay; a result it refuses
 * (a refusal the caller turns into an error after the commit) leaves the key unused.
 */
export async function ownerIdempotent<T>(
  ctx: AppContext,
  call: OwnerRequest,
  work: (tx: Queryable) => Promise<T>,
  keep: (result: T) => boolean = () => true,
): Promise<T> {
  const { key } = call;
  if (key === undefined) return ctx.db.transaction(work);
  const hash = ownerRequestHash(call.operation, call.request);
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    // A row older than 24 hours is taken over as if it did not exist.
    const claimed = await tx.query(
      `INSERT INTO owner_idempotency AS k (owner_id, key, request_hash, created_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (owner_id, key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, created_at = EXCLUDED.created_at, response = NULL
         WHERE k.created_at <= $5
       RETURNING 1 AS claimed`,
      [call.ownerId, key, hash, new Date(now), new Date(now - IDEMPOTENCY_TTL_MS)],
    );
    if (claimed.length === 0) {
      // The upsert found a live row (waiting for it to commit if it was being written): replay it.
      const row = await one<{ request_hash: string; response: T | null }>(
        tx,
        'SELECT request_hash, response FROM owner_idempotency WHERE owner_id = $1 AND key = $2',
        [call.ownerId, key],
      );
      if (row.request_hash !== hash) {
        throw new ApiError(
          'idempotency_conflict',
          'This Idempotency-Key was already used with a different request.',
        );
      }
      // Cannot happen: a row becomes visible only when its call commits with its answer.
      if (row.response === null) {
        throw new ApiError(
          'idempotency_conflict',
          'A request with this Idempotency-Key is still in progress.',
        );
      }
      return row.response;
    }
    const result = await work(tx);
    if (keep(result)) {
      await tx.query('UPDATE owner_idempotency SET response = $3 WHERE owner_id = $1 AND key = $2', [
        call.ownerId,
        key,
        JSON.stringify(result),
      ]);
    } else {
      await tx.query('DELETE FROM owner_idempotency WHERE owner_id = $1 AND key = $2', [call.ownerId, key]);
    }
    return result;
  });
}
