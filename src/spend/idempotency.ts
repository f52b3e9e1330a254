import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { refusalError } from './refusals.ts';
import type { SpendResult } from './result.ts';

// Idempotency-Key of an x402 payment (src/x402/service.ts; keys 'x402:<key>'). A card checkout
// keeps its key on its confirmation row instead (spend_run; migration 0023), and reads this
// table only for keys used before that migration (that read goes with migration 0040,
// docs/deploy.md). The key row is inserted first in the payment's own transaction: a concurrent
// request with the same key waits on the unique index until the first commits (then replays its
// response) or rolls back (then runs itself). So money moves once.
// Only successful responses (200/202) are kept; a refused request can be retried with the same key.
// Responses are stored encrypted.

/** Keys are honoured for 24 hours (also written as an interval in spend_run). */
export const IDEMPOTENCY_TTL_MS = 24 * 3600_000;

export async function claimIdempotencyKey(
  ctx: AppContext,
  tx: Queryable,
  botId: string,
  key: string,
  hash: string,
  now: number,
): Promise<SpendResult | undefined> {
  // A row older than 24 hours is taken over as if it did not exist.
  const claimed = await tx.query(
    `INSERT INTO checkout_idempotency AS k (bot_id, key, request_hash, created_at) VALUES ($1, $2, $3, $4)
     ON CONFLICT (bot_id, key) DO UPDATE
       SET request_hash = EXCLUDED.request_hash, created_at = EXCLUDED.created_at, status_code = NULL, response_enc = NULL
       WHERE k.created_at <= $5
     RETURNING 1 AS claimed`,
    [botId, key, hash, new Date(now), new Date(now - IDEMPOTENCY_TTL_MS)],
  );
  if (claimed.length === 1) return undefined;
  const row = (
    await tx.query<{ request_hash: string; status_code: number | null; response_enc: string | null }>(
      'SELECT request_hash, status_code, response_enc FROM checkout_idempotency WHERE bot_id = $1 AND key = $2',
      [botId, key],
    )
  )[0];
  // The upsert above found the row (it waited for it to commit): it is there.
  if (!row) throw new Error(`idempotency key row of bot ${botId} vanished`);
  if (row.request_hash !== hash) {
    throw refusalError('partner_wallet', { error: 'idempotency_conflict' });
  }
  if (row.status_code === null || row.response_enc === null) {
    // Cannot happen: rows become visible only when their checkout commits with its response.
    throw new ApiError('idempotency_conflict', 'A request with this Idempotency-Key is still in progress.');
  }
  return {
    statusCode: row.status_code as 200 | 202,
    body: JSON.parse(ctx.secrets.decrypt(row.response_enc)) as Record<string, unknown>,
  };
}

export async function saveIdempotentResponse(
  ctx: AppContext,
  tx: Queryable,
  botId: string,
  key: string,
  result: SpendResult,
): Promise<void> {
  await tx.query(
    'UPDATE checkout_idempotency SET status_code = $3, response_enc = $4 WHERE bot_id = $1 AND key = $2',
    [botId, key, result.statusCode, ctx.secrets.encrypt(JSON.stringify(result.body))],
  );
}

export async function pruneIdempotencyKeys(q: Queryable, now: number): Promise<void> {
  await q.query('DELETE FROM checkout_idempotency WHERE created_at <= $1', [
    new Date(now - IDEMPOTENCY_TTL_MS),
  ]);
}
