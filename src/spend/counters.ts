import type { Queryable } from '../platform/db/port.ts';
import { type WindowKind, windowStart } from '../platform/time.ts';

// Spending windows kept as counters, for both rails: one spend_windows row per scope, its day, ISO
// week and month side by side (migration 0026). A purchase on either rail adds to them in
// spend_run (src/migrations/functions/), with one conditional upsert of its three rows, each under
// its own limits, in one fixed lock order (card → owner → bot for a card, the card row holding the
// profile's allowance too: migration 0059; x402 → owner → bot for the partner wallet); a released
// hold (deny, expiry, a refused or lapsed x402 payment) subtracts here in the same order.

export type LimitName =
  | 'card_daily'
  | 'card_monthly'
  | 'profile_allowance'
  | 'master_daily'
  | 'master_monthly'
  | 'bot_monthly';

export interface CounterSpec {
  name: LimitName;
  scope: string;
  kind: WindowKind;
}

/**
 * Gives back a released hold: subtracts from the windows the hold was taken in, where they are
 * still the scope's current ones (a window that has rolled over since is no longer read). One
 * statement per scope, in the order given (consecutive specs of one scope share it), so the lock
 * order stays the one spend_run takes.
 */
export async function subtractFromCounters(
  tx: Queryable,
  specs: readonly Pick<CounterSpec, 'scope' | 'kind'>[],
  amountMicros: number,
  heldAt: number,
): Promise<void> {
  const scopes: Array<{ scope: string; kinds: Set<WindowKind> }> = [];
  for (const spec of specs) {
    const last = scopes[scopes.length - 1];
    if (last && last.scope === spec.scope) last.kinds.add(spec.kind);
    else scopes.push({ scope: spec.scope, kinds: new Set([spec.kind]) });
  }
  const start = (kinds: Set<WindowKind>, kind: WindowKind) =>
    kinds.has(kind) ? windowStart(kind, heldAt) : null;
  for (const { scope, kinds } of scopes) {
    await tx.query(
      `UPDATE spend_windows SET
         day_micros = CASE WHEN day_start = $2 THEN greatest(day_micros - $5::bigint, 0) ELSE day_micros END,
         week_micros = CASE WHEN week_start = $3 THEN greatest(week_micros - $5::bigint, 0) ELSE week_micros END,
         month_micros = CASE WHEN month_start = $4 THEN greatest(month_micros - $5::bigint, 0) ELSE month_micros END
        WHERE scope = $1`,
      [scope, start(kinds, 'day'), start(kinds, 'week'), start(kinds, 'month'), amountMicros],
    );
  }
}

/** What a scope has spent in the current window of one kind (0 when the window has rolled over). */
export function spentInWindowSql(kind: WindowKind, scopeExpr: string, startParam: string): string {
  return `(SELECT CASE WHEN ${kind}_start = ${startParam} THEN ${kind}_micros ELSE 0 END
             FROM spend_windows WHERE scope = ${scopeExpr})`;
}
