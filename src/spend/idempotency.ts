import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { refusalError } from './refusals.ts';
import type { SpendResult } from './result.ts';

// The Idempotency-Key of a purchase, on either rail, is kept on the purchase's own row with the
// request's hash and looked up by spend_run (src/migrations/functions/spend_run.sql) under a
// transaction advisory lock on (bot, key): a card checkout's on its confirmation (migration 0023),
// an x402 payment's on its x402_payments row (migration 0051). A replay is rebuilt from the row.
//
// What is left of the table checkout_idempotency (encrypted responses): x402 payments keyed before
// migration 0051 ('x402:<key>') are answered from it for their remaining 24 hours (legacyReplay,
// read only; it goes once no such row can be younger than 24 hours: docs/deploy.md), and the fetch
// mode keeps its final answers there (src/x402/fetch.ts: the fetched resource, which no row
// rebuilds). Rows older than 24 hours are pruned (pruneIdempotencyKeys, and the retention job).

/** Keys are honoured for 24 hours (also written as an interval in spend_run). */
export const IDEMPOTENCY_TTL_MS = 24 * 3600_000;

/**
 * The stored answer of an x402 payment keyed before migration 0051, under 24 hours old: replayed
 * as it was (the same key with another body: 409 idempotency_conflict). Undefined otherwise.
 */
export async function legacyReplay(
  ctx: AppContext,
  q: Queryable,
  botId: string,
  key: string,
  hash: string,
  now: number,
): Promise<SpendResult | undefined> {
  const row = (
    await q.query<{ request_hash: string; status_code: number | null; response_enc: string | null }>(
      `SELECT request_hash, status_code, response_enc FROM checkout_idempotency
        WHERE bot_id = $1 AND key = $2 AND created_at > $3 AND response_enc IS NOT NULL`,
      [botId, key, new Date(now - IDEMPOTENCY_TTL_MS)],
    )
  )[0];
  if (!row || row.status_code === null || row.response_enc === null) return undefined;
  if (row.request_hash !== hash) {
    throw refusalError('partner_wallet', { error: 'idempotency_conflict' });
  }
  return {
    statusCode: row.status_code as 200 | 202,
    body: JSON.parse(ctx.secrets.decrypt(row.response_enc)) as Record<string, unknown>,
  };
}

export async function pruneIdempotencyKeys(q: Queryable, now: number): Promise<void> {
  await q.query('DELETE FROM checkout_idempotency WHERE created_at <= $1', [
    new Date(now - IDEMPOTENCY_TTL_MS),
  ]);
}
