import { ApiError } from '../platform/errors.ts';
import { microsToUsd } from '../platform/money.ts';
import { tooMany } from '../platform/rateLimit.ts';
import type { WindowKind } from '../platform/time.ts';

// The one mapping of a spending refusal to the spec's error, for both rails: the code, the limit's
// name and the figures (limit_usd, remaining_usd, balance_usd) the bot is told. A card checkout's
// own limits are card_guardrail_violation, the partner wallet's rail_guardrail_violation; the
// master budget, the funds, the wallet's state, the rate limit and the Idempotency-Key read the
// same on both, in the rail's words (purchase / payment). card_not_found and the other card-only
// refusals are mapped in src/checkout/service.ts, the partner wallet's lists and rail state in
// src/x402/service.ts. test/spend/bothRails.test.ts runs one table of cases through both rails.

export type Rail = 'card_wallet' | 'partner_wallet';

/** A limit with a window: the amount would take the window's spending past it. */
export type WindowLimitName =
  | 'card_daily'
  | 'card_monthly'
  | 'x402_daily'
  | 'x402_monthly'
  | 'master_daily'
  | 'master_monthly';

export type Refusal =
  | { error: 'wallet_not_active' }
  | { error: 'wallet_frozen' }
  | {
      error: 'per_transaction';
      name: 'card_per_transaction' | 'x402_per_transaction' | 'master_per_transaction';
      limitMicros: number;
    }
  | { error: 'window_limit'; name: WindowLimitName; limitMicros: number; spentMicros: number }
  | { error: 'allowance'; limitMicros: number; spentMicros: number; window: WindowKind }
  | { error: 'insufficient_funds'; balanceMicros: number }
  | { error: 'rate_limited'; retryAfterSeconds: number }
  | { error: 'idempotency_conflict' };

const WORDS: Record<Rail, { wallet: string; thing: string; requests: string }> = {
  card_wallet: { wallet: 'wallet', thing: 'purchase', requests: 'checkout requests' },
  partner_wallet: { wallet: 'partner wallet', thing: 'payment', requests: 'payment requests' },
};

type LimitCode = 'card_guardrail_violation' | 'rail_guardrail_violation' | 'master_budget_exceeded';

const LIMITS: Record<
  WindowLimitName | 'card_per_transaction' | 'x402_per_transaction' | 'master_per_transaction',
  { code: LimitCode; limit: 'per_transaction' | 'daily' | 'monthly'; text: string }
> = {
  card_per_transaction: {
    code: 'card_guardrail_violation',
    limit: 'per_transaction',
    text: "The amount is above the card's per-transaction limit.",
  },
  card_daily: {
    code: 'card_guardrail_violation',
    limit: 'daily',
    text: "The purchase would exceed the card's daily budget.",
  },
  card_monthly: {
    code: 'card_guardrail_violation',
    limit: 'monthly',
    text: "The purchase would exceed the card's monthly budget.",
  },
  x402_per_transaction: {
    code: 'rail_guardrail_violation',
    limit: 'per_transaction',
    text: "The amount is above the partner wallet's per-transaction limit.",
  },
  x402_daily: {
    code: 'rail_guardrail_violation',
    limit: 'daily',
    text: "The payment would exceed the partner wallet's daily limit.",
  },
  x402_monthly: {
    code: 'rail_guardrail_violation',
    limit: 'monthly',
    text: "The payment would exceed the partner wallet's monthly limit.",
  },
  master_per_transaction: {
    code: 'master_budget_exceeded',
    limit: 'per_transaction',
    text: "The amount is above the owner's per-transaction limit.",
  },
  master_daily: {
    code: 'master_budget_exceeded',
    limit: 'daily',
    text: "The purchase would exceed the owner's daily budget.",
  },
  master_monthly: {
    code: 'master_budget_exceeded',
    limit: 'monthly',
    text: "The purchase would exceed the owner's monthly budget.",
  },
};

/** A refusal of either rail, as the spec's error. */
export function refusalError(rail: Rail, r: Refusal): ApiError {
  const w = WORDS[rail];
  switch (r.error) {
    case 'wallet_not_active':
      return new ApiError(
        'wallet_not_active',
        'The wallet is not active: your owner has not claimed you yet.',
      );
    case 'wallet_frozen':
      return new ApiError('wallet_frozen', 'The wallet is frozen by the owner.');
    case 'insufficient_funds':
      return new ApiError('insufficient_funds', `The ${w.wallet} balance is too low for this ${w.thing}.`, {
        balance_usd: microsToUsd(r.balanceMicros),
      });
    case 'rate_limited':
      return tooMany(r.retryAfterSeconds, w.requests);
    case 'idempotency_conflict':
      return new ApiError(
        'idempotency_conflict',
        'This Idempotency-Key was already used with a different request body.',
      );
    case 'per_transaction': {
      // Nothing can be spent above it: what remains is the limit itself.
      const e = LIMITS[r.name];
      return new ApiError(e.code, e.text, {
        limit: e.limit,
        limit_usd: microsToUsd(r.limitMicros),
        remaining_usd: microsToUsd(r.limitMicros),
      });
    }
    case 'window_limit': {
      const e = LIMITS[r.name];
      return new ApiError(e.code, e.text, {
        limit: e.limit,
        limit_usd: microsToUsd(r.limitMicros),
        remaining_usd: microsToUsd(Math.max(0, r.limitMicros - r.spentMicros)),
      });
    }
    case 'allowance':
      return new ApiError('allowance_exceeded', "The purchase would exceed the profile's allowance.", {
        limit: 'allowance',
        window: r.window,
        limit_usd: microsToUsd(r.limitMicros),
        remaining_usd: microsToUsd(Math.max(0, r.limitMicros - r.spentMicros)),
      });
  }
}
