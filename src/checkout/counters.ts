import type { Queryable } from '../platform/db/port.ts';
import { type WindowKind, windowStart } from '../platform/time.ts';

// Spending windows kept as counters (spend_counters), updated in the checkout's transaction.
//
// Concurrency: all of a checkout's counters are added in ONE multi-row INSERT … ON CONFLICT DO
// UPDATE whose WHERE refuses an addition that would pass the counter's limit. Rows are processed
// in the order given, so every checkout locks its counter rows in the same global order (card →
// profile → owner → bot); the wallet row comes last (ledger). Two checkouts therefore never wait on
// each other in a cycle. Under READ COMMITTED the WHERE is re-checked against the newest committed
// row after waiting for its lock, so no interleaving can pass a limit.

export type LimitName =
  | 'card_daily'
  | 'card_monthly'
  | 'profile_allowance'
  | 'master_daily'
  | 'master_monthly'
  | 'bot_daily'
  | 'bot_monthly';

export interface CounterSpec {
  name: LimitName;
  scope: string;
  kind: WindowKind;
  /** null: counted but never limiting (the bot's own figures). */
  limitCents: number | null;
}

export interface CounterKey {
  scope: string;
  kind: WindowKind;
  start: Date;
}

export type AddResult = { ok: true } | { ok: false; failed: CounterSpec; spentCents: number };

const NO_LIMIT = '9223372036854775807';

/**
 * Adds amountCents to every counter, or reports the first (in the given order) whose limit it would
 * pass. On failure some counters may have been added: the caller must roll the transaction back.
 */
export async function addToCounters(
  tx: Queryable,
  specs: readonly CounterSpec[],
  amountCents: number,
  at: number,
): Promise<AddResult> {
  // A fresh row is inserted without the WHERE check: an amount above a limit fails up front.
  for (const spec of specs) {
    if (spec.limitCents !== null && amountCents > spec.limitCents) {
      return { ok: false, failed: spec, spentCents: await spent(tx, spec, at) };
    }
  }
  const scopes = specs.map((s) => s.scope);
  const kinds = specs.map((s) => s.kind);
  const starts = specs.map((s) => windowStart(s.kind, at).toISOString());
  const limits = specs.map((s) => (s.limitCents === null ? NO_LIMIT : String(s.limitCents)));
  const rows = await tx.query<{ scope: string; window_kind: string }>(
    `WITH input AS (
       SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[])
         WITH ORDINALITY AS x(scope, kind, start, lim, ord))
     INSERT INTO spend_counters AS c (scope, window_kind, window_start, spent_cents)
     SELECT scope, kind, start, $5::bigint FROM input ORDER BY ord
     ON CONFLICT (scope, window_kind, window_start) DO UPDATE
       SET spent_cents = c.spent_cents + EXCLUDED.spent_cents
       WHERE c.spent_cents + EXCLUDED.spent_cents <=
             (SELECT lim FROM input WHERE input.scope = EXCLUDED.scope AND input.kind = EXCLUDED.window_kind)
     RETURNING c.scope, c.window_kind`,
    [scopes, kinds, starts, limits, amountCents],
  );
  if (rows.length === specs.length) return { ok: true };
  const done = new Set(rows.map((r) => `${r.scope}|${r.window_kind}`));
  const failed = specs.find((s) => !done.has(`${s.scope}|${s.kind}`))!;
  return { ok: false, failed, spentCents: await spent(tx, failed, at) };
}

async function spent(tx: Queryable, spec: CounterSpec, at: number): Promise<number> {
  const rows = await tx.query<{ spent_cents: number }>(
    'SELECT spent_cents FROM spend_counters WHERE scope = $1 AND window_kind = $2 AND window_start = $3',
    [spec.scope, spec.kind, windowStart(spec.kind, at)],
  );
  return Number(rows[0]?.spent_cents ?? 0);
}

/** Gives back a released hold: subtracts from the counters of the windows the hold was taken in. */
export async function subtractFromCounters(
  tx: Queryable,
  specs: readonly Pick<CounterSpec, 'scope' | 'kind'>[],
  amountCents: number,
  heldAt: number,
): Promise<void> {
  // One row at a time, in the same order as addToCounters, so lock order stays global.
  for (const spec of specs) {
    await tx.query(
      `UPDATE spend_counters SET spent_cents = greatest(spent_cents - $4::bigint, 0)
        WHERE scope = $1 AND window_kind = $2 AND window_start = $3`,
      [spec.scope, spec.kind, windowStart(spec.kind, heldAt), amountCents],
    );
  }
}
