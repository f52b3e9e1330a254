// Public types of the client. Where the service's OpenAPI document describes an endpoint, the type
// comes from src/generated.ts (regenerated from the route schemas, checked in CI); the documented
// definitions below are used only for endpoints the connected build does not describe yet.
import type { BotOperations } from './generated.ts';

type Known = keyof BotOperations;

/** The response body type of `op` with HTTP `status`, or `Fallback` when the document lacks it. */
export type ResponseOf<Op extends string, Status extends number, Fallback> = Op extends Known
  ? Status extends keyof BotOperations[Op]['responses']
    ? BotOperations[Op]['responses'][Status]
    : Fallback
  : Fallback;

/** The request body type of `op`, or `Fallback` when the document lacks it. */
export type BodyOf<Op extends string, Fallback> = Op extends Known
  ? BotOperations[Op] extends { body: infer B }
    ? B
    : Fallback
  : Fallback;

// ---- Registration ----------------------------------------------------------------

export type RegistrationRequest = BodyOf<
  'POST /api/v1/bots/register',
  {
    bot_name: string;
    owner_email: string;
    description?: string;
    callback_url?: string;
    pairing_code?: string;
    bot_type?: string;
    local_port?: number;
    webhook_path?: string;
  }
>;

export type RegistrationResponse = ResponseOf<
  'POST /api/v1/bots/register',
  201,
  {
    bot_id: string;
    api_key: string;
    claim_token: string | null;
    status: 'pending_owner_verification' | 'active';
    owner_verification_url?: string;
    paired?: boolean;
    owner_uid?: string;
    webhook_secret?: string;
    webhook_note?: string;
    webhook_url?: string;
    tunnel_token?: string;
    tunnel_setup?: Record<string, unknown>;
    primary_hooks_token?: string;
    primary_hooks_token_note?: string;
    important: string;
  }
>;

// ---- Status and wallet ---------------------------------------------------------

interface SpendingLimits {
  per_transaction_usd: number;
  monthly_usd: number;
  monthly_spent_usd: number;
  monthly_remaining_usd: number;
}

export type BotStatusResponse = ResponseOf<
  'GET /api/v1/bot/status',
  200,
  {
    bot_id: string;
    bot_name: string;
    status: 'active' | 'pending' | 'frozen' | 'inactive';
    default_rail: string | null;
    active_rails?: string[];
    rails: Record<
      string,
      { status: string; balance_usd: number; spending_limits?: SpendingLimits; address?: string }
    >;
    master_guardrails: {
      per_transaction_usd: number;
      daily_budget_usd: number;
      monthly_budget_usd: number;
    } | null;
    message?: string;
    pending_messages?: number;
    pending_topups?: number;
    webhook_status?: string;
    webhook_fail_count?: number;
  }
>;

export type WalletCheckResponse = ResponseOf<
  'GET /api/v1/bot/wallet/check',
  200,
  {
    wallet_status: string;
    balance_usd: number;
    card_status: string;
    spending_limits: SpendingLimits;
    pending_topups: number;
  }
>;

// ---- Checkout --------------------------------------------------------

export type CheckoutRequest = BodyOf<
  'POST /api/v1/bot/merchant/checkout',
  {
    profile_index: number;
    merchant_name: string;
    merchant_url: string;
    item_name: string;
    amount_cents: number;
    category?: string;
    task_id?: string;
    card_id?: string;
  }
>;

/** HTTP 200: approved at once; the card details complete the purchase. */
export type CheckoutApproved = ResponseOf<
  'POST /api/v1/bot/merchant/checkout',
  200,
  {
    approved: true;
    missing_digits: string;
    expiry_month: string;
    expiry_year: string;
    confirmation_id: string;
    profile_index: number;
    merchant_name: string;
    amount_usd: number;
    message: string;
  }
>;

/** HTTP 202: held for the owner's decision until `expires_at`; poll with `waitForDecision`. */
export type CheckoutPending = ResponseOf<
  'POST /api/v1/bot/merchant/checkout',
  202,
  {
    approved: false;
    status: 'pending_confirmation';
    confirmation_id: string;
    profile_index: number;
    merchant_name: string;
    amount_usd: number;
    expires_at: string;
    message: string;
  }
>;

export type CheckoutResult = CheckoutApproved | CheckoutPending;

export type CheckoutStatusResponse = ResponseOf<
  'GET /api/v1/bot/merchant/checkout/status',
  200,
  {
    confirmation_id: string;
    status: 'pending' | 'approved' | 'denied' | 'expired';
    amount_usd: number;
    merchant_name: string;
    item_name: string;
    message: string;
    missing_digits?: string;
    expiry_month?: string;
    expiry_year?: string;
  }
>;

// ---- Tasks -------------------------------------------------------------------

export interface TaskInstructions {
  profile_index: number;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  amount_cents: number;
  category: string;
}

export type NextTaskResponse = ResponseOf<
  'POST /api/v1/bot/tasks/next',
  200,
  {
    has_task: boolean;
    task_type?: string;
    task_id?: string;
    instructions?: TaskInstructions;
    message: string;
  }
>;

// ---- Top-up requests (asking the owner for funds) -----------------------------------------------

export type TopupRequest = BodyOf<
  'POST /api/v1/bot/wallet/topup-requests',
  {
    /** Amount asked for, in cents (1 to 1 000 000). */
    amount_cents: number;
    /** Why, shown to the owner (at most 500 characters; line breaks become spaces). */
    reason: string;
  }
>;

/** One top-up request as the bot sees it. */
export interface Topup {
  topup_id: string;
  status: 'pending' | 'approved' | 'declined' | 'expired';
  amount_usd: number;
  reason: string;
  approved_amount_usd?: number;
  note?: string;
  created_at: string;
  expires_at: string;
  decided_at: string | null;
}

export type TopupRequestResponse = ResponseOf<
  'POST /api/v1/bot/wallet/topup-requests',
  201,
  Topup & { message: string }
>;

export type TopupListResponse = ResponseOf<
  'GET /api/v1/bot/wallet/topup-requests',
  200,
  { topup_requests: Topup[] }
>;

// ---- Queued events (undelivered webhooks) ------------------------------------------------------

/** The body of every webhook delivery, and of each queued message. */
export interface WebhookEvent<Data = Record<string, unknown>> {
  /** Event id (`evt_…`), identical on every redelivery: deduplicate on it. */
  id: string;
  /** Event type, e.g. `purchase.approved`, `wallet.funded`. */
  event: KnownEventType | (string & {});
  /** ISO 8601 UTC with milliseconds. */
  timestamp: string;
  bot_id: string;
  data: Data;
}

export type KnownEventType =
  | 'wallet.activated'
  | 'wallet.funded'
  | 'wallet.frozen'
  | 'wallet.unfrozen'
  | 'wallet.balance_low'
  | 'wallet.topup_requested'
  | 'wallet.topup_approved'
  | 'wallet.topup_declined'
  | 'wallet.topup_expired'
  | 'purchase.approved'
  | 'purchase.denied'
  | 'purchase.expired'
  | 'task.available'
  | 'rails.updated';

/** Data of `purchase.approved`. */
export interface PurchaseApprovedData {
  checkout_id: string;
  amount: number;
  vendor: string;
  description: string;
  [key: string]: unknown;
}

export type MessagesResponse = ResponseOf<
  'GET /api/v1/bot/messages',
  200,
  { messages: WebhookEvent[]; [key: string]: unknown }
>;

export type AckMessagesResponse = ResponseOf<
  'POST /api/v1/bot/messages/ack',
  200,
  { acknowledged: number; [key: string]: unknown }
>;
