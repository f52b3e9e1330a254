import { Type } from '@sinclair/typebox';
import { IdParam, PageLimit } from '../platform/schemas.ts';
import { NOTE_MAX, REASON_MAX } from './service.ts';

// HTTP schemas of the top-up routes (routes.ts); handler types are their Static<> types.

const MAX_CENTS = 1_000_000;

export const TopupRequestBody = Type.Object(
  {
    amount_cents: Type.Integer({
      minimum: 1,
      maximum: MAX_CENTS,
      description: 'Amount asked for, in cents.',
    }),
    reason: Type.String({
      minLength: 1,
      // Room for control characters that become spaces; the cleaned text is at most REASON_MAX.
      maxLength: REASON_MAX * 2,
      description: `Why the bot needs the funds, shown to the owner (at most ${REASON_MAX} characters).`,
    }),
  },
  { additionalProperties: false },
);

export const BotTopup = Type.Object({
  topup_id: Type.String(),
  status: Type.Union([
    Type.Literal('pending'),
    Type.Literal('approved'),
    Type.Literal('declined'),
    Type.Literal('expired'),
  ]),
  amount_usd: Type.Number(),
  reason: Type.String(),
  approved_amount_usd: Type.Optional(Type.Number()),
  note: Type.Optional(Type.String()),
  created_at: Type.String(),
  expires_at: Type.String(),
  decided_at: Type.Union([Type.String(), Type.Null()]),
});

export const TopupAnswer = Type.Object({ ...BotTopup.properties, message: Type.String() });
export const BotTopupList = Type.Object({ topup_requests: Type.Array(BotTopup) });

export const TopupParams = Type.Object({ topup_id: IdParam('topup') });
const PageFields = {
  limit: Type.Optional(PageLimit),
  before: Type.Optional(
    Type.String({
      format: 'date-time',
      maxLength: 40,
      description: 'Only requests made before this time (the created_at of the last one you have).',
    }),
  ),
};
export const BotListQuery = Type.Object(PageFields);

export const OwnerListQuery = Type.Object({
  ...PageFields,
  status: Type.Optional(
    Type.Union([
      Type.Literal('pending'),
      Type.Literal('approved'),
      Type.Literal('declined'),
      Type.Literal('expired'),
      Type.Literal('all'),
    ]),
  ),
});
export const ApproveBody = Type.Object(
  {
    amount_cents: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_CENTS,
        description: 'Fund this amount instead of the one asked for (cents).',
      }),
    ),
  },
  { additionalProperties: false },
);
export const DeclineBody = Type.Object(
  {
    note: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: NOTE_MAX * 2,
        description: `Shown to the bot (at most ${NOTE_MAX} characters).`,
      }),
    ),
  },
  { additionalProperties: false },
);

const Status = Type.Union([
  Type.Literal('pending'),
  Type.Literal('approved'),
  Type.Literal('declined'),
  Type.Literal('expired'),
]);
const Time = Type.String({ format: 'date-time' });

export const OwnerTopupList = Type.Object({
  topup_requests: Type.Array(
    Type.Object({
      topup_id: Type.String(),
      bot_id: Type.String(),
      bot_name: Type.String(),
      status: Status,
      amount_usd: Type.Number(),
      reason: Type.String(),
      approved_amount_usd: Type.Union([Type.Number(), Type.Null()]),
      funding_id: Type.Union([Type.String(), Type.Null()]),
      note: Type.Union([Type.String(), Type.Null()]),
      created_at: Time,
      expires_at: Time,
      decided_at: Type.Union([Time, Type.Null()]),
    }),
  ),
});

/** The decision: an approval carries the funding, a decline its note. */
export const TopupDecision = Type.Union([
  Type.Object({
    topup_id: Type.String(),
    bot_id: Type.String(),
    status: Type.Literal('approved'),
    amount_usd: Type.Number(),
    approved_amount_usd: Type.Number(),
    funding_id: Type.String(),
    balance_usd: Type.Number(),
    bot_visible_balance_usd: Type.Number(),
    decided_at: Time,
  }),
  Type.Object({
    topup_id: Type.String(),
    bot_id: Type.String(),
    status: Type.Literal('declined'),
    amount_usd: Type.Number(),
    note: Type.Union([Type.String(), Type.Null()]),
    decided_at: Time,
  }),
]);
