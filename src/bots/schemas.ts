import { type Static, Type } from '@sinclair/typebox';

const SpendingLimits = Type.Object({
  per_transaction_usd: Type.Number(),
  monthly_usd: Type.Number(),
  monthly_spent_usd: Type.Number(),
  monthly_remaining_usd: Type.Number(),
});

export const StatusResponse = Type.Object({
  bot_id: Type.String(),
  bot_name: Type.String(),
  status: Type.Union([
    Type.Literal('active'),
    Type.Literal('pending'),
    Type.Literal('frozen'),
    Type.Literal('inactive'),
  ]),
  default_rail: Type.Union([Type.String(), Type.Null()]),
  active_rails: Type.Optional(Type.Array(Type.String())),
  rails: Type.Record(
    Type.String(),
    Type.Object(
      {
        status: Type.String(),
        balance_usd: Type.Number(),
        spending_limits: Type.Optional(SpendingLimits),
        address: Type.Optional(Type.String()),
        /** partner_wallet: when balance_usd was read from the chain (null: not read yet). */
        balance_read_at: Type.Optional(Type.Union([Type.String(), Type.Null()])),
        network: Type.Optional(Type.String()),
      },
      { additionalProperties: true },
    ),
  ),
  master_guardrails: Type.Union([
    Type.Object({
      per_transaction_usd: Type.Number(),
      daily_budget_usd: Type.Number(),
      monthly_budget_usd: Type.Number(),
    }),
    Type.Null(),
  ]),
  message: Type.Optional(Type.String()),
  pending_messages: Type.Optional(Type.Integer()),
  /** Open top-up requests (asked, not yet decided, not expired); present for active bots. */
  pending_topups: Type.Optional(Type.Integer()),
  webhook_status: Type.Optional(Type.String()),
  webhook_fail_count: Type.Optional(Type.Integer()),
});

export const WalletCheckResponse = Type.Object({
  wallet_status: Type.String(),
  balance_usd: Type.Number(),
  card_status: Type.String(),
  spending_limits: SpendingLimits,
  pending_topups: Type.Integer(),
});

export type StatusResponseT = Static<typeof StatusResponse>;
export type WalletCheckResponseT = Static<typeof WalletCheckResponse>;
