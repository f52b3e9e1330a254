import type { Db, Queryable } from '../platform/db/port.ts';
import type { WindowKind } from '../platform/time.ts';
import type { SpendBatchOptions } from '../spend/batch.ts';
import type { Refusal } from '../spend/refusals.ts';
import {
  reader,
  type SpendAnswer,
  type SpendParams,
  sharedRefusal,
  spendAlone,
  spendInTransaction,
} from '../spend/run.ts';

// A card purchase through the one guardrail chain, spend_run (src/migrations/functions/spend_run.sql,
// called through src/spend/run.ts with the method 'card'): the Idempotency-Key lookup, the rate
// limit, the chain and its writes in one database call. This file maps a checkout onto the call and
// checks the answer, returned as a discriminated union: `ok: true` with what the caller needs,
// `ok: false` with the refusal of the first rule that failed (raised by the function as SQLSTATE
// BP001, so that the statement's writes are undone), or `replay` with what an earlier checkout of
// the same Idempotency-Key (and body) answered.
//
// Two ways to call it: checkoutAlone, a statement on its own (one round trip, committed when it
// passes), and checkoutAttempt, inside the caller's transaction (when the caller has more to write
// with it: a task's state, the low-balance event).

/** spend_run's parameters as a checkout gives them: the card method's fields, and its event always. */
export interface AttemptParams extends Omit<SpendParams, 'method' | 'eventId' | 'eventBody'> {
  /** The card the bot named; null: the bot's one active card. */
  cardId: string | null;
  profileIndex: number;
  /** The purchase.approved outbox row, written only when the purchase is approved at once. */
  eventId: string;
  eventBody: string;
}

/** A checkout as spend_run's parameters: the card as the payment method. */
export function cardSpendParams(p: AttemptParams): SpendParams {
  const { cardId, profileIndex, ...rest } = p;
  return { ...rest, method: { kind: 'card', cardId, profileIndex } };
}

/** A refusal of a card purchase: the card's own, or one both rails share (src/spend/refusals.ts). */
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
  batch?: SpendBatchOptions,
): Promise<AttemptResult | null> {
  const a = await spendAlone(db, cardSpendParams(params), lowBalanceMicros, batch);
  return a === null ? null : resultOf(a);
}

/** Runs the chain in the caller's transaction. On a refusal the caller must roll back (the call failed). */
export async function checkoutAttempt(tx: Queryable, params: AttemptParams): Promise<AttemptResult> {
  return resultOf(await spendInTransaction(tx, cardSpendParams(params)));
}

function resultOf(a: SpendAnswer): AttemptResult {
  return parseAttempt(a.r);
}

/** Checks the function's jsonb answer; anything unexpected is a programming error (500), never a guess. */
export function parseAttempt(r: Record<string, unknown>): AttemptResult {
  const { bad, num, str, strOrNull, bool, windowKind, obj } = reader(r);

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
  switch (r.error) {
    case 'card_not_found':
    case 'card_not_active':
    case 'card_id_required':
    case 'invalid_profile':
      return { ok: false, refusal: { error: r.error } };
  }
  const shared = sharedRefusal(r);
  return shared ? { ok: false, refusal: shared } : bad();
}
