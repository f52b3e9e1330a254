// One error envelope: { "error": "<code>", "message": "..." } plus optional details. The closed
// list of codes and their HTTP status lives here; handlers throw ApiError (or return results that
// are translated into one) and the app's error handler serialises it.

export const ERROR_STATUS = {
  validation_error: 400,
  invalid_pairing_code: 400,
  invalid_claim_token: 400,
  card_id_required: 400,
  invalid_profile: 400,
  'Authentication required': 401,
  insufficient_funds: 402,
  forbidden: 403,
  csrf_failed: 403,
  wallet_not_active: 403,
  wallet_frozen: 403,
  card_not_active: 403,
  card_guardrail_violation: 403,
  allowance_exceeded: 403,
  master_budget_exceeded: 403,
  rail_not_active: 403,
  rail_guardrail_violation: 403,
  destination_not_allowed: 403,
  not_found: 404,
  card_not_found: 404,
  method_not_allowed: 405,
  duplicate_registration: 409,
  conflict: 409,
  already_claimed: 409,
  not_pending: 409,
  idempotency_conflict: 409,
  possible_same_card: 409,
  request_timeout: 408,
  rail_not_configured: 409,
  payload_too_large: 413,
  uri_too_long: 414,
  unsupported_media_type: 415,
  upgrade_required: 426,
  rate_limited: 429,
  headers_too_large: 431,
  internal_error: 500,
  not_implemented: 501,
  resource_unreachable: 502,
  tunnel_not_connected: 502,
  tunnel_upstream_error: 502,
  service_unavailable: 503,
  tunnel_timeout: 504,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export class ApiError extends Error {
  readonly status: number;

  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = ERROR_STATUS[code];
  }

  toBody(): Record<string, unknown> {
    return { error: this.code, message: this.message, ...this.details };
  }
}

export const authenticationRequired = (): ApiError =>
  new ApiError('Authentication required', 'Send a valid key in the header Authorization: Bearer <key>.');

export const notFound = (what = 'Resource'): ApiError => new ApiError('not_found', `${what} not found.`);

export const validationError = (message: string, details: Record<string, unknown> = {}): ApiError =>
  new ApiError('validation_error', message, details);
