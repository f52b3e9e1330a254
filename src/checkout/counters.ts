import type { Queryable } from '../platform/db/port.ts';
import { type WindowKind, windowStart } from '../platform/time.ts';

// Spending windows kept as counters (spend_counters). A checkout adds to them in
// checkout_attempt (src/migrations/functions/) with conditional upserts (checkout_add_counter), in the global lock order card →
// profile → owner → bot; a released hold (deny, expiry) subtracts here in the same order.

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

/** Gives back a released hold: subtracts from the counters of the windows the hold was taken in. */
export async function subtractFromCounters(
  tx: Queryable,
  specs: readonly Pick<CounterSpec, 'scope' | 'kind'>[],
  amountCents: number,
  heldAt: number,
): Promise<void> {
  // One row at a time, in the order checkout_attempt adds them, so the lock order stays global.
  for (const spec of specs) {
    await tx.query(
      `UPDATE spend_counters SET spent_cents = greatest(spent_cents - $4::bigint, 0)
        WHERE scope = $1 AND window_kind = $2 AND window_start = $3`,
      [spec.scope, spec.kind, windowStart(spec.kind, heldAt), amountCents],
    );
  }
}
