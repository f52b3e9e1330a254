// Public types of the client, taken from src/generated.ts (generated from the service's route
// schemas, which are exact; a test fails when it is stale).
import type { BotOperations } from './generated.ts';

// ---- Registration ----------------------------------------------------------------

export type RegistrationRequest = BotOperations['POST /api/v1/bots/register']['body'];

export type RegistrationResponse = BotOperations['POST /api/v1/bots/register']['responses'][201];

// ---- Status and wallet ---------------------------------------------------------

export type BotStatusResponse = BotOperations['GET /api/v1/bot/status']['responses'][200];

export type WalletCheckResponse = BotOperations['GET /api/v1/bot/wallet/check']['responses'][200];

// ---- Checkout --------------------------------------------------------

export type CheckoutRequest = BotOperations['POST /api/v1/bot/merchant/checkout']['body'];

/** HTTP 200: approved at once; the card details complete the purchase. */
export type CheckoutApproved = BotOperations['POST /api/v1/bot/merchant/checkout']['responses'][200];

/** HTTP 202: held for the owner's decision until `expires_at`; poll with `waitForDecision`. */
export type CheckoutPending = BotOperations['POST /api/v1/bot/merchant/checkout']['responses'][202];

export type CheckoutResult = CheckoutApproved | CheckoutPending;

export type CheckoutStatusResponse =
  BotOperations['GET /api/v1/bot/merchant/checkout/status']['responses'][200];

// ---- Tasks -------------------------------------------------------------------

export interface TaskInstructions {
  profile_index: number;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  amount_cents: number;
  category: string;
}

export type NextTaskResponse = BotOperations['POST /api/v1/bot/tasks/next']['responses'][200];

// ---- Top-up requests (asking the owner for funds) -----------------------------------------------

export type TopupRequest = BotOperations['POST /api/v1/bot/wallet/topup-requests']['body'];

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

export type TopupRequestResponse = BotOperations['POST /api/v1/bot/wallet/topup-requests']['responses'][201];

export type TopupListResponse = BotOperations['GET /api/v1/bot/wallet/topup-requests']['responses'][200];

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

export type MessagesResponse = BotOperations['GET /api/v1/bot/messages']['responses'][200];

export type AckMessagesResponse = BotOperations['POST /api/v1/bot/messages/ack']['responses'][200];
