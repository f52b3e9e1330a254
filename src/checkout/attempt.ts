import type { Queryable } from '../platform/db/port.ts';
import { namedCall } from '../platform/db/named.ts';
import { type WindowKind, windowStart } from '../platform/time.ts';

// The typed interface to checkout_attempt (src/migrations/functions/checkout_attempt.sql), the
// guardrail chain and its writes in one database call. The parameters are passed by name from one
// object (the mapping below is the only place that knows the database's parameter names), and the
// jsonb answer is checked and returned as a discriminated union: `ok: true` with what the caller
// needs, or `ok: false` with the refusal of the first rule that failed.

export interface AttemptParams {
  botId: string;
  /** The card the bot named; null: the bot's one active card. */
  cardId: string | null;
  profileIndex: number;
  amountCents: number;
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
}

export const attemptCall = namedCall<AttemptParams>('checkout_attempt', {
  p_bot_id: (p) => p.botId,
  p_card_id: (p) => p.cardId,
  p_profile_index: (p) => p.profileIndex,
  p_amount: (p) => p.amountCents,
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
});

/** A limit with a window: the amount would take the window's spending past it. */
export type WindowLimitName = 'card_daily' | 'card_monthly' | 'master_daily' | 'master_monthly';

export type AttemptRefusal =
  | { error: 'wallet_not_active' }
  | { error: 'wallet_frozen' }
  | { error: 'card_not_found' }
  | { error: 'card_not_active' }
  | { error: 'card_id_required' }
  | { error: 'invalid_profile' }
  | { error: 'per_transaction'; name: 'card_per_transaction' | 'master_per_transaction'; limitCents: number }
  | { error: 'window_limit'; name: WindowLimitName; limitCents: number; spentCents: number }
  | { error: 'allowance'; limitCents: number; spentCents: number; window: WindowKind }
  | { error: 'insufficient_funds'; balanceCents: number };

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
  availableBeforeCents: number;
  profileWindow: WindowKind;
}

export type AttemptResult = AttemptPassed | { ok: false; refusal: AttemptRefusal };

/** Runs the chain in the caller's transaction. On a refusal the caller must roll back. */
export async function checkoutAttempt(tx: Queryable, params: AttemptParams): Promise<AttemptResult> {
  const rows = await tx.query<{ r: Record<string, unknown> }>(
    `SELECT ${attemptCall.sql} AS r`,
    attemptCall.params(params),
  );
  const r = rows[0]?.r;
  if (!r) throw new Error('checkout_attempt returned no row');
  return parseAttempt(r);
}

const WINDOWS: readonly string[] = ['day', 'week', 'month'] satisfies WindowKind[];

/** Checks the function's jsonb answer; anything unexpected is a programming error (500), never a guess. */
export function parseAttempt(r: Record<string, unknown>): AttemptResult {
  const bad = (): never => {
    throw new Error(`unexpected checkout_attempt result ${JSON.stringify(r)}`);
  };
  const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : bad());
  const str = (v: unknown): string => (typeof v === 'string' ? v : bad());
  const strOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : str(v));
  const bool = (v: unknown): boolean => (typeof v === 'boolean' ? v : bad());
  const windowKind = (v: unknown): WindowKind => (WINDOWS.includes(str(v)) ? (v as WindowKind) : bad());

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
      availableBeforeCents: num(r.available_before),
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
      return refuse({ error: 'insufficient_funds', balanceCents: num(r.balance_cents) });
    case 'limit':
      switch (r.name) {
        case 'card_per_transaction':
        case 'master_per_transaction':
          return refuse({ error: 'per_transaction', name: r.name, limitCents: num(r.limit_cents) });
        case 'card_daily':
        case 'card_monthly':
        case 'master_daily':
        case 'master_monthly':
          return refuse({
            error: 'window_limit',
            name: r.name,
            limitCents: num(r.limit_cents),
            spentCents: num(r.spent_cents),
          });
        case 'profile_allowance':
          return refuse({
            error: 'allowance',
            limitCents: num(r.limit_cents),
            spentCents: num(r.spent_cents),
            window: windowKind(r.window),
          });
      }
  }
  return bad();
}
