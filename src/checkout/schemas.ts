import { type Static, Type } from '@sinclair/typebox';
import { IdParam } from '../platform/schemas.ts';

// HTTP schemas of the checkout and approval routes (routes.ts); handler types are their Static<>
// types (through the app's TypeBox type provider). Responses list exactly what the services return
// (src/checkout/service.ts, decisions.ts): the serializer drops a field a schema lacks.

// Unknown fields are refused (a `currency` the service does not read must not be taken for USD).
// profile_index outside 1–6 is the chain's invalid_profile, not a validation error.
export const CheckoutBody = Type.Object(
  {
    profile_index: Type.Integer({ minimum: -2_147_483_648, maximum: 2_147_483_647 }),
    merchant_name: Type.String({ minLength: 1, maxLength: 200 }),
    merchant_url: Type.String({ minLength: 1, maxLength: 2000 }),
    item_name: Type.String({ minLength: 1, maxLength: 500 }),
    amount_cents: Type.Integer({ minimum: 1, maximum: 10_000_000 }),
    category: Type.Optional(Type.String({ maxLength: 100 })),
    task_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    card_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  },
  { additionalProperties: false },
);

export type CheckoutBody = Static<typeof CheckoutBody>;

export const CheckoutHeaders = Type.Object({
  'idempotency-key': Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
});

export const Approved = Type.Object({
  approved: Type.Literal(true),
  missing_digits: Type.String(),
  expiry_month: Type.String(),
  expiry_year: Type.String(),
  confirmation_id: Type.String(),
  profile_index: Type.Integer(),
  merchant_name: Type.String(),
  amount_usd: Type.Number(),
  message: Type.String(),
});

export const Pending = Type.Object({
  approved: Type.Literal(false),
  status: Type.Literal('pending_confirmation'),
  confirmation_id: Type.String(),
  profile_index: Type.Integer(),
  merchant_name: Type.String(),
  amount_usd: Type.Number(),
  expires_at: Type.String(),
  message: Type.String(),
});

export type ApprovedBody = Static<typeof Approved>;
export type PendingBody = Static<typeof Pending>;

export const StatusQuery = Type.Object({ confirmation_id: Type.String({ minLength: 1, maxLength: 100 }) });

export const StatusResponse = Type.Object({
  confirmation_id: Type.String(),
  status: Type.Union([
    Type.Literal('pending'),
    Type.Literal('approved'),
    Type.Literal('denied'),
    Type.Literal('expired'),
  ]),
  amount_usd: Type.Number(),
  merchant_name: Type.String(),
  item_name: Type.String(),
  message: Type.String(),
  missing_digits: Type.Optional(Type.String()),
  expiry_month: Type.Optional(Type.String()),
  expiry_year: Type.Optional(Type.String()),
  expires_at: Type.Optional(Type.String()),
});

export type StatusResponse = Static<typeof StatusResponse>;

/** GET /api/v1/owner/approvals (decisions.ts listApprovals). */
export const ApprovalsResponse = Type.Object({
  approvals: Type.Array(
    Type.Object({
      confirmation_id: Type.String(),
      bot_id: Type.String(),
      bot_name: Type.String(),
      /** The card a card purchase is held on (never the profile); null for an x402 payment. */
      card_id: Type.Union([Type.String(), Type.Null()]),
      rail: Type.Union([Type.Literal('card_wallet'), Type.Literal('partner_wallet')]),
      amount_usd: Type.Number(),
      merchant_name: Type.String(),
      merchant_url: Type.String(),
      item_name: Type.String(),
      category: Type.Union([Type.String(), Type.Null()]),
      task_id: Type.Union([Type.String(), Type.Null()]),
      created_at: Type.String(),
      expires_at: Type.String(),
    }),
  ),
  /**
   * Bots that asked for BURST_MIN_PURCHASES or more purchases within BURST_WINDOW_MINUTES, still
   * waiting: a stolen key probing the payment profiles looks like this (docs/owners.md).
   */
  bursts: Type.Array(
    Type.Object({
      bot_id: Type.String(),
      bot_name: Type.String(),
      pending_purchases: Type.Integer(),
      first_at: Type.String(),
      last_at: Type.String(),
    }),
  ),
});

/** POST /api/v1/owner/approvals/{id}/approve|deny (src/spend/holds.ts decideByOwner). */
export const DecisionResponse = Type.Object({
  confirmation_id: Type.String(),
  status: Type.Union([Type.Literal('approved'), Type.Literal('denied')]),
  bot_id: Type.String(),
  amount_usd: Type.Number(),
  merchant_name: Type.String(),
  decided_at: Type.String(),
});

export const ConfirmationParams = Type.Object({ confirmation_id: IdParam('chk') });
