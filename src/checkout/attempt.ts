import { type Db, pgErrorCode, prepared, type Queryable } from '../platform/db/port.ts';
import { namedCall } from '../platform/db/named.ts';
import { type WindowKind, windowStart } from '../platform/time.ts';
import type { Refusal } from '../spend/refusals.ts';

// The typed interface to checkout_run (src/migrations/functions/checkout_run.sql): the
// Idempotency-Key lookup, the rate limit, the guardrail chain and its writes in one database call.
// The parameters are passed by name from one object (the mapping below is the only place that knows
// the database's parameter names), and the answer is checked and returned as a discriminated union:
// `ok: true` with what the caller needs, `ok: false` with the refusal of the first rule that failed
// (raised by the function as SQLSTATE BP001, so that the statement's writes are undone), or `replay`
// with what an earlier checkout of the same Idempotency-Key (and body) answered.
//
// Two ways to call it: checkoutAlone, a statement on its own (one round trip, committed when it
// passes), and checkoutAttempt, inside the caller's transaction (when the caller has more to write
// with it: a task's state, the low-balance event).

export interface AttemptParams {
  botId: string;
  /** The card the bot named; null: the bot's one active card. */
  cardId: string | null;
  profileIndex: number;
  amountMicros: number;
  /** Trimmed; null when absent or blank. */
  category: string | null;
  /** The confirmation id (chk_…) the purchase gets. */
  confirmationId: string;
  merchantName: string;
  merchantUrl: string;
  itemName: string;
  taskId: string | null;
  now: number;
  /** How long a held purchase waits for its owner (APPROVAL_WINDOW_SECONDS). */
  approvalWindowSeconds: number;
  /** The ledger transaction id (ltx_…) of the hold or debit. */
  ledgerTransactionId: string;
  /** The purchase.approved outbox row, written only when the purchase is approved at once. */
  eventId: string;
  eventBody: string;
  /** The bot's hourly checkout limit (rate_limits key and its limit; the window is an hour). */
  rateKey: string;
  rateLimit: number;
  /** The Idempotency-Key header, or null. */
  idempotencyKey: string | null;
  /** sha256 of the request (src/checkout/service.ts requestHash); null without a key. */
  requestHash: string | null;
}

/** What the call adds to AttemptParams (set by checkoutAlone and checkoutAttempt). */
interface CallParams extends AttemptParams {
  /** Alone: the visible balance's low mark (crossing it needs the caller's transaction). */
  lowBalanceMicros: number | null;
}

export const attemptCall = namedCall<CallParams>('checkout_run', {
  p_bot_id: (p) => p.botId,
  p_card_id: (p) => p.cardId,
  p_profile_index: (p) => p.profileIndex,
  p_amount: (p) => p.amountMicros,
  p_category: (p) => p.category,
  p_id: (p) => p.confirmationId,
  p_merchant_name: (p) => p.merchantName,
  p_merchant_url: (p) => p.merchantUrl,
  p_item_name: (p) => p.itemName,
  p_task_id: (p) => p.taskId,
  p_now: (p) => new Date(p.now),
  p_day: (p) => windowStart('day', p.now),
  p_week: (p) => windowStart('week', p.now),
  p_month: (p) => windowStart('month', p.now),
  p_window_seconds: (p) => p.approvalWindowSeconds,
  p_ledger_id: (p) => p.ledgerTransactionId,
  p_event_id: (p) => p.eventId,
  p_event_body: (p) => p.eventBody,
  p_rate_key: (p) => p.rateKey,
  p_rate_limit: (p) => p.rateLimit,
  p_idempotency_key: (p) => p.idempotencyKey,
  p_request_hash: (p) => p.requestHash,
  p_low_balance_micros: (p) => p.lowBalanceMicros,
});

/** SQLSTATE of a refusal (its message is the refusal), and of a checkout that needs a transaction. */
const REFUSED = 'BP001';
const NEEDS_TRANSACTION = 'BP002';

/** A refusal of checkout_run: the card's own, or one both rails share (src/spend/refusals.ts). */
export type AttemptRefusal =
  | { error: 'card_not_found' }
  | { error: 'card_not_active' }
  | { error: 'card_id_required' }
  | { error: 'invalid_profile' }
  | Refusal;

export interface AttemptPassed {
  ok: true;
  /** Waiting for a decision (202), or approved at once (200). */
  held: boolean;
  isReal: boolean;
  cardId: string;
  ownerId: string;
  /** The card's secrets, for the approved answer (format 2: profilesEnc; legacy cards: secretEnc). */
  secretEnc: string | null;
  profilesEnc: string | null;
  missingPosition: number;
  cardCreatedAt: Date;
  /** The visible balance before this purchase. */
  availableBeforeMicros: number;
  profileWindow: WindowKind;
}

/** The card fields an approved answer's digits and expiry come from (src/checkout/service.ts cardDetails). */
export interface AttemptCard {
  id: string;
  secret_enc: string | null;
  profiles_enc: string | null;
  missing_position: number;
  created_at: Date;
}

/** An earlier checkout of the same bot, Idempotency-Key and body (committed, under 24 hours old). */
export type AttemptReplay =
  | {
      /** Its confirmation: the answer is rebuilt from it (and, approved, from its card). */
      kind: 'confirmation';
      held: boolean;
      isReal: boolean;
      confirmationId: string;
      profileIndex: number;
      merchantName: string;
      amountMicros: number;
      /** Set when it was held. */
      expiresAt: Date | null;
      card: AttemptCard;
    }
  | {
      /** A response stored in checkout_idempotency before migration 0023 (encrypted). */
      kind: 'stored';
      statusCode: 200 | 202;
      responseEnc: string;
    };

export type AttemptResult =
  | AttemptPassed
  | { ok: false; refusal: AttemptRefusal }
  | { ok: 'replay'; replay: AttemptReplay };

/** Prepared once per connection (the named parameters cost a parse and a plan at every call). */
const ATTEMPT_SQL = prepared(`SELECT ${attemptCall.sql} AS r`);

/**
 * Runs the chain as one statement in its own transaction: one round trip, committed when it
 * passes, nothing written when it refuses. Null when the purchase would take the visible balance
 * below `lowBalanceMicros`: nothing was written, and the caller runs it with checkoutAttempt in a
 * transaction that also writes the low-balance event.
 */
export async function checkoutAlone(
  db: Db,
  params: AttemptParams,
  lowBalanceMicros: number,
): Promise<AttemptResult | null> {
  try {
    return answerOf(
      await db.write<{ r: Record<string, unknown> }>(
        ATTEMPT_SQL,
        attemptCall.params({ ...params, lowBalanceMicros }),
      ),
    );
  } catch (error) {
    if (pgErrorCode(error) === NEEDS_TRANSACTION) return null;
    return refusalOf(error);
  }
}

/** Runs the chain in the caller's transaction. On a refusal the caller must roll back (the call failed). */
export async function checkoutAttempt(tx: Queryable, params: AttemptParams): Promise<AttemptResult> {
  try {
    return answerOf(
      await tx.query<{ r: Record<string, unknown> }>(
        ATTEMPT_SQL,
        attemptCall.params({ ...params, lowBalanceMicros: null }),
      ),
    );
  } catch (error) {
    return refusalOf(error);
  }
}

function answerOf(rows: { r: Record<string, unknown> }[]): AttemptResult {
  const r = rows[0]?.r;
  if (!r) throw new Error('checkout_run returned no row');
  return parseAttempt(r);
}

/** A refusal raised by the function, as its answer; any other error is thrown on. */
function refusalOf(error: unknown): AttemptResult {
  if (pgErrorCode(error) !== REFUSED) throw error;
  let refusal: unknown;
  try {
    refusal = JSON.parse((error as Error).message);
  } catch {
    throw error;
  }
  if (typeof refusal !== 'object' || refusal === null || !('error' in refusal)) throw error;
  return parseAttempt(refusal as Record<string, unknown>);
}

const WINDOWS: readonly string[] = ['day', 'week', 'month'] satisfies WindowKind[];

/** Checks the function's jsonb answer; anything unexpected is a programming error (500), never a guess. */
export function parseAttempt(r: Record<string, unknown>): AttemptResult {
  const bad = (): never => {
    throw new Error(`unexpected checkout_run result ${JSON.stringify(r)}`);
  };
  const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : bad());
  const str = (v: unknown): string => (typeof v === 'string' ? v : bad());
  const strOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : str(v));
  const bool = (v: unknown): boolean => (typeof v === 'boolean' ? v : bad());
  const windowKind = (v: unknown): WindowKind => (WINDOWS.includes(str(v)) ? (v as WindowKind) : bad());
  const obj = (v: unknown): Record<string, unknown> =>
    typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : bad();

  if (r.replay !== undefined) {
    const p = obj(r.replay);
    return {
      ok: 'replay',
      replay: {
        kind: 'confirmation',
        held: bool(p.held),
        isReal: bool(p.is_real),
        confirmationId: str(p.confirmation_id),
        profileIndex: num(p.profile_index),
        merchantName: str(p.merchant_name),
        amountMicros: num(p.amount_micros),
        expiresAt: p.expires_at === null ? null : new Date(str(p.expires_at)),
        card: {
          id: str(p.card_id),
          secret_enc: strOrNull(p.secret_enc),
          profiles_enc: strOrNull(p.profiles_enc),
          missing_position: num(p.missing_position),
          created_at: new Date(str(p.card_created_at)),
        },
      },
    };
  }
  if (r.legacy !== undefined) {
    const p = obj(r.legacy);
    const statusCode = num(p.status_code);
    if (statusCode !== 200 && statusCode !== 202) return bad();
    return { ok: 'replay', replay: { kind: 'stored', statusCode, responseEnc: str(p.response_enc) } };
  }

  if (r.ok === true) {
    return {
      ok: true,
      held: bool(r.held),
      isReal: bool(r.is_real),
      cardId: str(r.card_id),
      ownerId: str(r.owner_id),
      secretEnc: strOrNull(r.secret_enc),
      profilesEnc: strOrNull(r.profiles_enc),
      missingPosition: num(r.missing_position),
      cardCreatedAt: new Date(str(r.card_created_at)),
      availableBeforeMicros: num(r.available_before),
      profileWindow: windowKind(r.profile_window),
    };
  }
  const refuse = (refusal: AttemptRefusal): AttemptResult => ({ ok: false, refusal });
  switch (r.error) {
    case 'wallet_not_active':
    case 'wallet_frozen':
    case 'card_not_found':
    case 'card_not_active':
    case 'card_id_required':
    case 'invalid_profile':
      return refuse({ error: r.error });
    case 'insufficient_funds':
      return refuse({ error: 'insufficient_funds', balanceMicros: num(r.balance_micros) });
    case 'rate_limited':
      return refuse({ error: 'rate_limited', retryAfterSeconds: num(r.retry_after_seconds) });
    case 'idempotency_conflict':
      return refuse({ error: 'idempotency_conflict' });
    case 'limit':
      switch (r.name) {
        case 'card_per_transaction':
        case 'master_per_transaction':
          return refuse({ error: 'per_transaction', name: r.name, limitMicros: num(r.limit_micros) });
        case 'card_daily':
        case 'card_monthly':
        case 'master_daily':
        case 'master_monthly':
          return refuse({
            error: 'window_limit',
            name: r.name,
            limitMicros: num(r.limit_micros),
            spentMicros: num(r.spent_micros),
          });
        case 'profile_allowance':
          return refuse({
            error: 'allowance',
            limitMicros: num(r.limit_micros),
            spentMicros: num(r.spent_micros),
            window: windowKind(r.window),
          });
      }
  }
  return bad();
}
