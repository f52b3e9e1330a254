import { Type } from '@sinclair/typebox';
import { IdParam } from '../platform/schemas.ts';
import { NOTE_MAX } from '../topups/service.ts';
import { MODES, RULES } from './views/cards.ts';
import { FILTERS } from './views/webhooks.ts';

// HTTP schemas of the dashboard's pages (the *Pages.ts handlers): path parameters, query strings
// and form bodies. Handlers get their request types from these through the TypeBox type provider
// (`Static<>`), never from hand-written route generics. Form fields are optional text of bounded
// length: a missing or malformed value is the handler's to explain on the page, not a bare 400.

/** An optional form or query field of at most `max` characters. */
export const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));

/** A form with nothing but its CSRF token. */
export const CsrfForm = Type.Object({ _csrf: Text(200) });

/** `?notice=<code>`: a key into the page's NOTICES table (src/dashboard/forms.ts). */
export const NoticeQuery = Type.Object({ notice: Text(40) });
/** `?flash=<id>`: a one-time value to show after a redirect (src/dashboard/flash.ts). */
export const FlashQuery = Type.Object({ flash: Text(64) });
export const NoticeFlashQuery = Type.Object({ notice: Text(40), flash: Text(64) });

const Before = Type.Optional(Type.String({ format: 'date-time', maxLength: 40 }));

// --- Paths ---

export { BotParams } from '../owners/schemas.ts';
export const RailParams = Type.Object({
  bot_id: IdParam('bot'),
  rail_key: Type.Union([Type.Literal('card_wallet'), Type.Literal('partner_wallet')]),
});
export const CardParams = Type.Object({ bot_id: IdParam('bot'), card_id: IdParam('card') });
export const ScheduleParams = Type.Object({ bot_id: IdParam('bot'), schedule_id: IdParam('schedule') });
export const DeliveryParams = Type.Object({ bot_id: IdParam('bot'), delivery_id: IdParam('whd') });
export const ConfirmationParams = Type.Object({ confirmation_id: IdParam('chk') });
export const DecisionParams = Type.Object({
  decision: Type.Union([Type.Literal('approve'), Type.Literal('deny')]),
});
export const TopupParams = Type.Object({ topup_id: IdParam('topup') });
export const TokenParams = Type.Object({ token_id: Type.String({ maxLength: 80 }) });

// --- Sign-in (authPages.ts) ---

export const SignInQuery = Type.Object({
  next: Text(500),
  claim_token: Text(200),
  signed_out: Text(5),
});
export const SignInBody = Type.Object({
  email: Text(300),
  next: Text(500),
  claim_token: Text(200),
  _csrf: Text(200),
});
export const VerifyQuery = Type.Object({ token: Text(200) });
export const VerifyBody = Type.Object({ token: Text(200), _csrf: Text(200) });

// --- Account (ownerPages.ts, tokenPages.ts) ---

export const ClaimQuery = Type.Object({ token: Text(200) });
export const ClaimBody = Type.Object({ claim_token: Text(200), _csrf: Text(200) });
export const GuardrailsBody = Type.Object({
  per_transaction_usd: Text(20),
  daily_budget_usd: Text(20),
  monthly_budget_usd: Text(20),
  /** The amounts the form showed: a field still equal to its shown amount changes nothing. */
  shown_per_transaction_usd: Text(20),
  shown_daily_budget_usd: Text(20),
  shown_monthly_budget_usd: Text(20),
  return_to: Text(100),
  _csrf: Text(200),
});
export const TokenBody = Type.Object({ name: Text(200), _csrf: Text(200) });

// --- A bot (botPages.ts, x402Pages.ts) ---

export const BotQuery = Type.Object({ notice: Text(40), flash: Text(64), before: Before });
export const FundBody = Type.Object({
  amount_usd: Text(30),
  _csrf: Text(200),
  // The form's Idempotency-Key (owners/idempotency.ts), made when the page was shown.
  idempotency_key: Type.Optional(Type.String({ pattern: '^[0-9a-f]{32}$' })),
});
export const RailBody = Type.Object({
  status: Type.Union([Type.Literal('active'), Type.Literal('inactive')]),
  address: Text(200),
  _csrf: Text(200),
});
export const X402ImportBody = Type.Object({ private_key: Text(100), _csrf: Text(200) });
export const X402SettingsBody = Type.Object({
  per_transaction_usd: Text(30),
  daily_usd: Text(30),
  monthly_usd: Text(30),
  approval_threshold_usd: Text(30),
  approval_mode: Type.Optional(
    Type.Union([Type.Literal('ask_for_everything'), Type.Literal('auto_approve_under_threshold')]),
  ),
  allow_domains: Text(20_000),
  deny_domains: Text(20_000),
  allow_pay_to: Text(20_000),
  deny_pay_to: Text(20_000),
  _csrf: Text(200),
});

// --- Cards (cardPages.ts) ---

export const CardStartBody = Type.Object({
  label: Text(100),
  /** "A card you already added": empty for a new card. */
  same_card_as: Type.Optional(Type.String({ pattern: '^(card_[a-z2-7]{1,64})?$', maxLength: 80 })),
  _csrf: Text(200),
});
export const CardSettingsBody = Type.Object({
  per_transaction_usd: Text(30),
  daily_usd: Text(30),
  monthly_usd: Text(30),
  approval_mode: Type.Optional(Type.Union(MODES.map(([m]) => Type.Literal(m)))),
  approval_threshold_usd: Text(30),
  approved_categories: Text(2000),
  /** The values the form showed: a field still equal to its shown value changes nothing. */
  shown_per_transaction_usd: Text(30),
  shown_daily_usd: Text(30),
  shown_monthly_usd: Text(30),
  shown_approval_mode: Text(40),
  shown_approval_threshold_usd: Text(30),
  shown_approved_categories: Text(2000),
  _csrf: Text(200),
});
export const CardStatusBody = Type.Object({
  status: Type.Union([Type.Literal('active'), Type.Literal('frozen')]),
  _csrf: Text(200),
});
const PROFILE_FIELDS = {
  allowance_usd: Text(30),
  allowance_window: Type.Optional(
    Type.Union([Type.Literal('day'), Type.Literal('week'), Type.Literal('month')]),
  ),
  approval_rule: Type.Optional(Type.Union(RULES.map(([r]) => Type.Literal(r)))),
  approval_threshold_usd: Text(30),
  enabled: Type.Optional(Type.Union([Type.Literal('yes'), Type.Literal('no')])),
};
/**
 * Every profile of a card in one form: p<i>_<field> for profile i (1 to 6), and p<i>_shown_<field>,
 * the value the form showed (a field still equal to it changes nothing).
 */
export const ProfilesBody = Type.Object({
  ...Object.fromEntries(
    [1, 2, 3, 4, 5, 6].flatMap((i) =>
      Object.entries(PROFILE_FIELDS).flatMap(([name, schema]) => [
        [`p${i}_${name}`, schema],
        [`p${i}_shown_${name}`, Text(30)],
      ]),
    ),
  ),
  _csrf: Text(200),
});
export const PROFILE_FIELD_NAMES = Object.keys(PROFILE_FIELDS) as (keyof typeof PROFILE_FIELDS)[];

// --- Schedules (schedulePages.ts) ---

export const ScheduleBody = Type.Object({
  cron: Text(200),
  timezone: Text(100),
  card_id: Text(100),
  profile_index: Text(2),
  merchant_name: Text(200),
  merchant_url: Text(2000),
  item_name: Text(500),
  amount_usd: Text(30),
  category: Text(100),
  _csrf: Text(200),
});

// --- Webhook log (webhookPages.ts) ---

export const WebhookLogQuery = Type.Object({
  status: Type.Optional(Type.Union(FILTERS.map((s) => Type.Literal(s)))),
  before: Before,
  notice: Text(40),
});

// --- Approvals (approvalPages.ts, topupPages.ts) ---

const LinkFields = { s: Text(100), e: Text(20), sig: Text(200) };
/** The signed one-click link's fields (src/dashboard/signedLinks.ts). */
export const OneClickQuery = Type.Object(LinkFields);
export const OneClickBody = Type.Object({ ...LinkFields, _csrf: Text(200) });
export const TopupDecisionBody = Type.Object({
  _csrf: Text(200),
  note: Text(NOTE_MAX * 2),
});
