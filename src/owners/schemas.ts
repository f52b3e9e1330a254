import { type Static, Type } from '@sinclair/typebox';
import { IdParam, PageLimit } from '../platform/schemas.ts';

// HTTP schemas of the owner API (routes.ts, tokenRoutes.ts). The types the handlers see are these
// schemas' Static<> types; responses list exactly what the services return, except the figures of
// the decoy reserve, which /openapi.json never names (the document does not mention the decoy
// mechanism): the objects holding them allow additional properties, so they are still serialised
// (test/foundation/exactResponses.test.ts compares each answer with the service's result).

const Cents = (max: number) => Type.Integer({ minimum: 0, maximum: max });
const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);
const Time = Type.String({ format: 'date-time' });
const Usd = Type.Number();

export const BotParams = Type.Object({ bot_id: IdParam('bot') });
export type BotParams = Static<typeof BotParams>;

export const Page = Type.Object({
  limit: Type.Optional(PageLimit),
  before: Type.Optional(Type.String({ format: 'date-time', maxLength: 40 })),
});

export const ClaimBody = Type.Object({ claim_token: Type.String({ minLength: 1, maxLength: 200 }) });
export const ClaimResponse = Type.Object({ bot_id: Type.String(), status: Type.Literal('active') });

export const PairingCodeResponse = Type.Object({ pairing_code: Type.String(), expires_at: Time });

const BotStatus = Type.Union([
  Type.Literal('pending'),
  Type.Literal('active'),
  Type.Literal('inactive'),
  Type.Literal('frozen'),
]);

/** One bot as its owner sees it (owners/bots.ts presentBot). */
export const OwnerBot = Type.Object({
  bot_id: Type.String(),
  bot_name: Type.String(),
  description: Nullable(Type.String()),
  bot_type: Type.String(),
  owner_email: Type.String(),
  status: BotStatus,
  wallet: Type.Object(
    { status: Type.String(), balance_usd: Usd, held_usd: Usd, bot_visible_balance_usd: Usd },
    // The reserve figure is serialised but not named in /openapi.json, which never mentions the
    // decoy mechanism (test/tasks/merchants.test.ts): see the note at the top.
    { additionalProperties: true },
  ),
  webhook: Type.Object({
    target: Type.Union([Type.Literal('callback_url'), Type.Literal('tunnel')]),
    callback_url: Nullable(Type.String()),
    tunnel_hostname: Nullable(Type.String()),
    status: Type.String(),
    fail_count: Type.Integer(),
    waiting_for_tunnel: Type.Boolean({
      description:
        'True for a managed-tunnel bot whose tunnel client has never connected: deliveries wait for it (status stays pending), run the tunnel_client_command the bot was given',
    }),
  }),
  pending_approvals: Type.Integer(),
  pending_topups: Type.Integer(),
  created_at: Time,
  claimed_at: Nullable(Time),
});

export const OwnerBotList = Type.Object({ bots: Type.Array(OwnerBot) });

export const OwnerBotDetail = Type.Composite([
  OwnerBot,
  Type.Object({
    rails: Type.Array(
      Type.Object({ rail: Type.String(), status: Type.String(), address: Nullable(Type.String()) }),
    ),
    cards: Type.Array(
      Type.Object({
        card_id: Type.String(),
        label: Nullable(Type.String()),
        status: Type.String(),
        real_profile_index: Type.Integer(),
        guardrails: Type.Object({ per_transaction_usd: Usd, daily_usd: Usd, monthly_usd: Usd }),
        approval_mode: Type.String(),
        approval_threshold_usd: Usd,
        approved_categories: Type.Array(Type.String()),
        created_at: Time,
        activated_at: Nullable(Time),
      }),
    ),
  }),
]);

export const FundBody = Type.Object({ amount_cents: Type.Integer({ minimum: 1, maximum: 1_000_000 }) });
export const FundResponse = Type.Object(
  {
    bot_id: Type.String(),
    funding_id: Type.String(),
    amount_usd: Usd,
    balance_usd: Usd,
    bot_visible_balance_usd: Usd,
    wallet_status: Type.String(),
  },
  { additionalProperties: true },
);

export const FrozenResponse = Type.Object({ bot_id: Type.String(), wallet_status: Type.String() });

export const RailParams = Type.Object({
  bot_id: IdParam('bot'),
  rail_key: Type.Union([Type.Literal('card_wallet'), Type.Literal('partner_wallet')]),
});
export const RailBody = Type.Object({
  status: Type.Union([Type.Literal('active'), Type.Literal('inactive')]),
  address: Type.Optional(Type.String({ minLength: 1, maxLength: 200, pattern: '^[\\x21-\\x7e]+$' })),
  private_key: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
});
/** The rail after the change; the partner wallet's address, network and asset once it has a wallet. */
export const RailResponse = Type.Object({
  bot_id: Type.String(),
  rail: Type.Union([Type.Literal('card_wallet'), Type.Literal('partner_wallet')]),
  status: Type.Union([Type.Literal('active'), Type.Literal('inactive')]),
  active_rails: Type.Array(Type.String()),
  address: Type.Optional(Type.String()),
  network: Type.Optional(Type.String()),
  asset: Type.Optional(Type.String()),
});

export const GuardrailsBody = Type.Object(
  {
    per_transaction_cents: Type.Optional(Cents(100_000_000)),
    daily_budget_cents: Type.Optional(Cents(100_000_000)),
    monthly_budget_cents: Type.Optional(Cents(1_000_000_000)),
  },
  { minProperties: 1 },
);
export type GuardrailsBody = Static<typeof GuardrailsBody>;
export const Guardrails = Type.Object({
  per_transaction_usd: Usd,
  daily_budget_usd: Usd,
  monthly_budget_usd: Usd,
  daily_spent_usd: Usd,
  monthly_spent_usd: Usd,
});

export const TransactionList = Type.Object({
  transactions: Type.Array(
    Type.Object({
      id: Type.String(),
      kind: Type.String(),
      reference: Nullable(Type.String()),
      description: Nullable(Type.String()),
      available_change_usd: Usd,
      held_change_usd: Usd,
      created_at: Time,
    }),
  ),
});

export const AuditList = Type.Object({
  entries: Type.Array(
    Type.Object({
      id: Type.Integer(),
      action: Type.String(),
      details: Type.Record(Type.String(), Type.Unknown()),
      created_at: Time,
    }),
  ),
});

export const ApiKeyRotated = Type.Object({
  bot_id: Type.String(),
  api_key: Type.String(),
  note: Type.String(),
});
export const WebhookSecretRotated = Type.Object({
  bot_id: Type.String(),
  webhook_secret: Type.String(),
  previous_secret_valid_until: Time,
  note: Type.String(),
});

// Owner API tokens (tokenRoutes.ts).
export const TokenView = Type.Object({
  token_id: Type.String(),
  name: Type.String(),
  token_prefix: Type.String(),
  created_at: Type.String(),
  last_used_at: Type.Union([Type.String(), Type.Null()]),
});
export const TokenList = Type.Object({ tokens: Type.Array(TokenView) });
export const TokenName = Type.String({
  minLength: 1,
  maxLength: 100,
  pattern: '^[^\\x00-\\x1f\\x7f]*\\S[^\\x00-\\x1f\\x7f]*$',
});
export const TokenBody = Type.Object({ name: TokenName });
export const TokenCreated = Type.Composite([TokenView, Type.Object({ token: Type.String() })]);
export const TokenParams = Type.Object({ token_id: IdParam('otk') });
export const TokenRevoked = Type.Object({ token_id: Type.String(), revoked_at: Type.String() });
