import { ApiError } from '../platform/errors.ts';
import { centsToUsd } from '../platform/money.ts';
import type { WindowKind } from '../platform/time.ts';
import type { LimitName } from './counters.ts';

// The one mapping of a failed limit to its refusal, for both rails: the code, the limit's name and
// the figures (limit_usd, remaining_usd) the bot is told. A card checkout's own limits are
// card_guardrail_violation (here); the partner wallet's are rail_guardrail_violation
// (src/x402/service.ts); the master budget and a profile's allowance read the same on both.
// test/spend/bothRails.test.ts runs one table of cases through both rails.

const LIMIT_ERRORS: Record<
  LimitName,
  {
    code: 'card_guardrail_violation' | 'allowance_exceeded' | 'master_budget_exceeded';
    limit: string;
    text: string;
  }
> = {
  card_daily: { code: 'card_guardrail_violation', limit: 'daily', text: "the card's daily budget" },
  card_monthly: { code: 'card_guardrail_violation', limit: 'monthly', text: "the card's monthly budget" },
  profile_allowance: { code: 'allowance_exceeded', limit: 'allowance', text: "the profile's allowance" },
  master_daily: { code: 'master_budget_exceeded', limit: 'daily', text: "the owner's daily budget" },
  master_monthly: { code: 'master_budget_exceeded', limit: 'monthly', text: "the owner's monthly budget" },
  bot_monthly: { code: 'master_budget_exceeded', limit: 'monthly', text: 'the monthly budget' },
};

export function limitError(
  name: LimitName,
  limitCents: number,
  spentCents: number,
  window?: WindowKind,
): ApiError {
  const e = LIMIT_ERRORS[name];
  const remaining = Math.max(0, limitCents - spentCents);
  return new ApiError(e.code, `The purchase would exceed ${e.text}.`, {
    limit: e.limit,
    ...(window ? { window } : {}),
    limit_usd: centsToUsd(limitCents),
    remaining_usd: centsToUsd(remaining),
  });
}

export function perTransactionError(
  code: 'card_guardrail_violation' | 'master_budget_exceeded',
  limitCents: number,
): ApiError {
  return new ApiError(
    code,
    code === 'card_guardrail_violation'
      ? "The amount is above the card's per-transaction limit."
      : "The amount is above the owner's per-transaction limit.",
    { limit: 'per_transaction', limit_usd: centsToUsd(limitCents), remaining_usd: centsToUsd(limitCents) },
  );
}
