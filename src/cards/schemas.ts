import { Type } from '@sinclair/typebox';
import { IdParam } from '../platform/schemas.ts';

// HTTP schemas of the card routes (routes.ts); handler types are their Static<> types.

export const BotParams = Type.Object({ bot_id: IdParam('bot') });
export const CardParams = Type.Object({ bot_id: IdParam('bot'), card_id: IdParam('card') });
export const ProfileParams = Type.Object({
  bot_id: IdParam('bot'),
  card_id: IdParam('card'),
  profile_index: Type.String({ pattern: '^[1-6]$' }),
});
const Cents = (max: number) => Type.Integer({ minimum: 0, maximum: max });
export const ApprovalMode = Type.Union([
  Type.Literal('ask_for_everything'),
  Type.Literal('auto_approve_under_threshold'),
  Type.Literal('auto_approve_by_category'),
]);

// Format 2 (src/cards/split.ts builds it where the owner types the number): per profile only the
// 3 digits at the missing positions and the Luhn residue of the profile's other digits.
export const ActivateBody = Type.Object(
  {
    bin: Type.String({
      pattern: '^[0-9]{6}$',
      description: 'The first 6 digits (issuer prefix), shared by all profiles.',
    }),
    card_length: Type.Integer({ minimum: 12, maximum: 19 }),
    expiry_month: Type.String({ pattern: '^(0?[1-9]|1[0-2])$' }),
    expiry_year: Type.String({ pattern: '^20[0-9]{2}$' }),
    profiles: Type.Array(
      Type.Object(
        {
          profile_index: Type.Integer({ minimum: 1, maximum: 6 }),
          missing_digits: Type.String({ pattern: '^[0-9]{3}$' }),
          visible_luhn: Type.Integer({ minimum: 0, maximum: 9 }),
        },
        { additionalProperties: false },
      ),
      { minItems: 6, maxItems: 6 },
    ),
    different_card: Type.Optional(
      Type.Boolean({
        description:
          'Confirms that this is not a card you already added (409 possible_same_card says which one it resembles). For the same card, start it with same_card_as instead.',
      }),
    ),
  },
  { additionalProperties: false },
);

export const PatchBody = Type.Object(
  {
    per_transaction_cents: Type.Optional(Cents(100_000_000)),
    daily_cents: Type.Optional(Cents(100_000_000)),
    monthly_cents: Type.Optional(Cents(1_000_000_000)),
    approval_mode: Type.Optional(ApprovalMode),
    approval_threshold_cents: Type.Optional(Cents(100_000_000)),
    approved_categories: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 50 }),
    ),
    status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('frozen')])),
  },
  { additionalProperties: false, minProperties: 1 },
);

export const ProfileBody = Type.Object(
  {
    allowance_cents: Type.Optional(Cents(1_000_000_000)),
    allowance_window: Type.Optional(
      Type.Union([Type.Literal('day'), Type.Literal('week'), Type.Literal('month')]),
    ),
    approval_rule: Type.Optional(
      Type.Union([
        Type.Literal('follow_card'),
        Type.Literal('ask_for_everything'),
        Type.Literal('auto_approve_under_threshold'),
      ]),
    ),
    approval_threshold_cents: Type.Optional(Cents(100_000_000)),
    enabled: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false, minProperties: 1 },
);

export const SameCardBody = Type.Object(
  {
    same_card_as: Type.String({
      pattern: '^card_[a-z2-7]{1,64}$',
      maxLength: 80,
      description: 'An activated card of yours (on any bot) with the same card number.',
    }),
  },
  { additionalProperties: false },
);

export const StartBody = Type.Optional(
  Type.Object(
    {
      label: Type.Optional(Type.String({ maxLength: 100 })),
      same_card_as: Type.Optional(
        Type.String({
          pattern: '^card_[a-z2-7]{1,64}$',
          maxLength: 80,
          description:
            'A card you already added (to any of your bots) with the same card number: this card gets the very same six profiles, so both bots hold one and the same profiles file.',
        }),
      ),
    },
    { additionalProperties: false },
  ),
);

const Usd = Type.Number();
const Time = Type.String({ format: 'date-time' });
const Positions = Type.Array(Type.Integer(), { minItems: 3, maxItems: 3 });

export const CardStarted = Type.Object({
  card_id: Type.String(),
  bot_id: Type.String(),
  /** active at once when it shares the profiles of a card activated with format 2 (same_card_as). */
  status: Type.Union([Type.Literal('pending_activation'), Type.Literal('active')]),
  real_profile_index: Type.Integer(),
  missing_digit_positions: Positions,
  same_card_as: Type.Union([Type.String(), Type.Null()]),
});

export const ProfileView = Type.Object({
  profile_index: Type.Integer(),
  enabled: Type.Boolean(),
  allowance_usd: Usd,
  allowance_window: Type.Union([Type.Literal('day'), Type.Literal('week'), Type.Literal('month')]),
  approval_rule: Type.Union([
    Type.Literal('follow_card'),
    Type.Literal('ask_for_everything'),
    Type.Literal('auto_approve_under_threshold'),
  ]),
  approval_threshold_usd: Usd,
});

export const ProfileUpdated = Type.Composite([Type.Object({ card_id: Type.String() }), ProfileView]);

export const CardView = Type.Object({
  card_id: Type.String(),
  bot_id: Type.String(),
  label: Type.Union([Type.String(), Type.Null()]),
  status: Type.Union([Type.Literal('pending_activation'), Type.Literal('active'), Type.Literal('frozen')]),
  real_profile_index: Type.Integer(),
  missing_digit_positions: Positions,
  guardrails: Type.Object({ per_transaction_usd: Usd, daily_usd: Usd, monthly_usd: Usd }),
  approval_mode: ApprovalMode,
  approval_threshold_usd: Usd,
  approved_categories: Type.Array(Type.String()),
  profiles: Type.Array(ProfileView),
  legacy_profiles_file: Type.Boolean({
    description: 'Activated before format 2: the service can still give its (legacy) profiles file.',
  }),
  same_card_as: Type.Union([Type.String(), Type.Null()], {
    description:
      'The card whose six profiles this one shares (the same card number on another bot, or added again).',
  }),
  created_at: Time,
  activated_at: Type.Union([Time, Type.Null()]),
});

const Address = Type.Object({
  line1: Type.String(),
  city: Type.String(),
  state: Type.String(),
  postal_code: Type.String(),
  country: Type.String(),
});

export const ProfilesFileView = Type.Object({
  format: Type.Literal('botpay-payment-profiles/1'),
  card_id: Type.String(),
  bot_id: Type.String(),
  missing_digit_positions: Positions,
  missing_digits_are: Type.String(),
  instructions: Type.String(),
  profiles: Type.Array(
    Type.Object({
      profile_index: Type.Integer(),
      card_number: Type.String(),
      cardholder_name: Type.String(),
      billing_address: Address,
    }),
  ),
});
