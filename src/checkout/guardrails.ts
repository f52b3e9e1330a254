import type { CardRow, ProfileRow } from '../cards/service.ts';
import { ApiError } from '../platform/errors.ts';
import { centsToUsd } from '../platform/money.ts';
import type { WindowKind } from '../platform/time.ts';
import type { CounterSpec, LimitName } from './counters.ts';

// The pieces of the guardrail chain that are pure rules: which counters a purchase counts in, the
// error of a failed limit, and the approval decision.

export interface PurchaseScope {
  botId: string;
  ownerId: string;
  cardId: string;
  profileIndex: number;
  isReal: boolean;
  profileWindow: WindowKind;
}

export interface Limits {
  card: Pick<CardRow, 'daily_cents' | 'monthly_cents'>;
  profile: Pick<ProfileRow, 'allowance_cents'>;
  master: { daily: number; monthly: number } | null;
}

/**
 * The counters a purchase counts in, in the global lock order (card → profile → owner → bot).
 *
 * A decoy profile counts only in counters of its own: its card-level windows are kept per profile
 * ('card:<id>:p<index>'), exactly as the real profile's are kept in 'card:<id>' (which only real
 * purchases reach). Every profile therefore sees the same card guardrails evaluated against its own
 * history, and a decoy never consumes the real card's, the owner's master or the bot's budgets.
 */
export function counterSpecs(p: PurchaseScope, limits?: Limits): CounterSpec[] {
  const cardScope = p.isReal ? `card:${p.cardId}` : `card:${p.cardId}:p${p.profileIndex}`;
  const specs: CounterSpec[] = [
    { name: 'card_daily', scope: cardScope, kind: 'day', limitCents: limits?.card.daily_cents ?? null },
    { name: 'card_monthly', scope: cardScope, kind: 'month', limitCents: limits?.card.monthly_cents ?? null },
    {
      name: 'profile_allowance',
      scope: `profile:${p.cardId}:${p.profileIndex}`,
      kind: p.profileWindow,
      limitCents: limits?.profile.allowance_cents ?? null,
    },
  ];
  if (p.isReal) {
    specs.push(
      {
        name: 'master_daily',
        scope: `owner:${p.ownerId}`,
        kind: 'day',
        limitCents: limits?.master?.daily ?? null,
      },
      {
        name: 'master_monthly',
        scope: `owner:${p.ownerId}`,
        kind: 'month',
        limitCents: limits?.master?.monthly ?? null,
      },
      { name: 'bot_daily', scope: `bot:${p.botId}`, kind: 'day', limitCents: null },
      { name: 'bot_monthly', scope: `bot:${p.botId}`, kind: 'month', limitCents: null },
    );
  }
  return specs;
}

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
  bot_daily: { code: 'master_budget_exceeded', limit: 'daily', text: 'the daily budget' },
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

/**
 * Whether a human must approve. The card's mode decides; the profile's rule can only make the
 * decision stricter ("follow_card" keeps it, the others can turn an automatic approval into a hold).
 */
export function needsApproval(
  card: Pick<CardRow, 'approval_mode' | 'approval_threshold_cents' | 'approved_categories'>,
  profile: Pick<ProfileRow, 'approval_rule' | 'approval_threshold_cents'>,
  amountCents: number,
  category: string | null,
): boolean {
  let automatic: boolean;
  switch (card.approval_mode) {
    case 'auto_approve_under_threshold':
      automatic = amountCents < card.approval_threshold_cents;
      break;
    case 'auto_approve_by_category':
      automatic = category !== null && card.approved_categories.includes(category.trim().toLowerCase());
      break;
    default:
      automatic = false;
  }
  if (profile.approval_rule === 'ask_for_everything') automatic = false;
  if (profile.approval_rule === 'auto_approve_under_threshold') {
    automatic = automatic && amountCents < profile.approval_threshold_cents;
  }
  return !automatic;
}
