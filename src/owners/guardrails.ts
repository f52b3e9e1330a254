import { spentInWindowSql } from '../spend/counters.ts';
import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { one } from '../platform/db/port.ts';
import { microsToUsd, optionalCentsToMicros } from '../platform/money.ts';
import { windowStart } from '../platform/time.ts';
import { audit } from './audit.ts';

// The owner's master guardrails: limits over all of the owner's bots, with what is spent. Stored in
// micros, given in whole cents (the API's `…_cents`), shared by both rails to the micro.

export interface MasterGuardrailsInput {
  per_transaction_cents?: number;
  daily_budget_cents?: number;
  monthly_budget_cents?: number;
}

export async function getMasterGuardrails(q: Queryable, ownerId: string, now: number) {
  const row = await one<{
    master_per_transaction_micros: number;
    master_daily_micros: number;
    master_monthly_micros: number;
    day_spent: number;
    month_spent: number;
  }>(
    q,
    `SELECT master_per_transaction_micros, master_daily_micros, master_monthly_micros,
       coalesce(${spentInWindowSql('day', "'owner:' || o.id", '$2')}, 0) AS day_spent,
       coalesce(${spentInWindowSql('month', "'owner:' || o.id", '$3')}, 0) AS month_spent
     FROM owners o WHERE id = $1`,
    [ownerId, windowStart('day', now), windowStart('month', now)],
  );
  return {
    per_transaction_usd: microsToUsd(row.master_per_transaction_micros),
    daily_budget_usd: microsToUsd(row.master_daily_micros),
    monthly_budget_usd: microsToUsd(row.master_monthly_micros),
    daily_spent_usd: microsToUsd(row.day_spent),
    monthly_spent_usd: microsToUsd(row.month_spent),
  };
}

export async function updateMasterGuardrails(ctx: AppContext, ownerId: string, input: MasterGuardrailsInput) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await tx.query(
      `UPDATE owners SET
         master_per_transaction_micros = coalesce($2, master_per_transaction_micros),
         master_daily_micros = coalesce($3, master_daily_micros),
         master_monthly_micros = coalesce($4, master_monthly_micros)
       WHERE id = $1`,
      [
        ownerId,
        optionalCentsToMicros(input.per_transaction_cents),
        optionalCentsToMicros(input.daily_budget_cents),
        optionalCentsToMicros(input.monthly_budget_cents),
      ],
    );
    // Only the fields this change knows, whatever object the caller passed.
    const details = {
      per_transaction_cents: input.per_transaction_cents,
      daily_budget_cents: input.daily_budget_cents,
      monthly_budget_cents: input.monthly_budget_cents,
    };
    await audit(tx, {
      ownerId,
      action: 'master_guardrails.updated',
      details: Object.fromEntries(Object.entries(details).filter(([, v]) => v !== undefined)),
      at: now,
    });
    return getMasterGuardrails(tx, ownerId, now);
  });
}
