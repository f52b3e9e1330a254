import { type Static, Type } from '@sinclair/typebox';

// HTTP schemas of the bot routes (routes.ts): registration, status and wallet check; handler
// types are their Static<> types through the TypeBox type provider.

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

// Registration (POST /api/v1/bots/register, routes.ts).

export const RegistrationBody = Type.Object({
  bot_name: Type.String({ minLength: 1, maxLength: 100 }),
  owner_email: Type.String({ minLength: 3, maxLength: 254 }),
  description: Type.Optional(Type.String({ maxLength: 500 })),
  callback_url: Type.Optional(Type.String({ minLength: 1, maxLength: 2000 })),
  pairing_code: Type.Optional(Type.String({ minLength: 1, maxLength: 20 })),
  bot_type: Type.Optional(Type.String({ minLength: 1, maxLength: 50 })),
  local_port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
  webhook_path: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: '^/' })),
});

const TunnelSetupSchema = Type.Object(
  {
    webhook_url: Type.String(),
    tunnel_token: Type.String(),
    tunnel_client_command: Type.String(),
    local_port: Type.Integer(),
    webhook_path: Type.String(),
    steps: Type.Array(Type.String()),
    webhook_headers: Type.Record(Type.String(), Type.String()),
    retry_policy: Type.String(),
    primary_gateway_config: Type.Optional(Type.Object({}, { additionalProperties: true })),
  },
  { additionalProperties: true },
);

export const RegistrationResponse = Type.Object({
  bot_id: Type.String(),
  api_key: Type.String(),
  claim_token: Type.Union([Type.String(), Type.Null()]),
  status: Type.Union([Type.Literal('pending_owner_verification'), Type.Literal('active')]),
  owner_verification_url: Type.Optional(Type.String()),
  paired: Type.Optional(Type.Boolean()),
  owner_uid: Type.Optional(Type.String()),
  webhook_secret: Type.Optional(Type.String()),
  webhook_note: Type.Optional(Type.String()),
  webhook_url: Type.Optional(Type.String()),
  tunnel_token: Type.Optional(Type.String()),
  tunnel_setup: Type.Optional(TunnelSetupSchema),
  primary_hooks_token: Type.Optional(Type.String()),
  primary_hooks_token_note: Type.Optional(Type.String()),
  important: Type.String(),
});
