// A spending call's answer on either rail, before it is sent: the status and body the bot gets
// (stored, encrypted, for an Idempotency-Key replay: ./idempotency.ts) and what the caller does
// after the commit.
export interface SpendResult {
  statusCode: 200 | 202;
  body: Record<string, unknown>;
  /** Set (never stored or sent) when the purchase was held, on any profile: an owner e-mail is due. */
  heldForOwner?: string;
  /** Set (never stored or sent) when this purchase took the visible balance below LOW_BALANCE_MICROS. */
  balanceLow?: boolean;
}
