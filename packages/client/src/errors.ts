// Every failure the client reports is a BotPayError: an HTTP error answer of the service (with the
// spec's error code and its details), or a transport failure after the retries ran out.

/**
 * Every error code a bot's call can be answered with (docs/errors.md; the service's error table less
 * the codes only owner routes answer), then the client's own transport codes.
 */
export const BOT_PAY_ERROR_CODES = [
  'validation_error',
  'invalid_pairing_code',
  'card_id_required',
  'invalid_profile',
  'Authentication required',
  'insufficient_funds',
  'forbidden',
  'wallet_not_active',
  'wallet_frozen',
  'card_not_active',
  'card_guardrail_violation',
  'allowance_exceeded',
  'master_budget_exceeded',
  'rail_not_active',
  'rail_guardrail_violation',
  'destination_not_allowed',
  'not_found',
  'card_not_found',
  'method_not_allowed',
  'request_timeout',
  'duplicate_registration',
  'conflict',
  'idempotency_conflict',
  'rail_not_configured',
  'payload_too_large',
  'uri_too_long',
  'unsupported_media_type',
  'upgrade_required',
  'rate_limited',
  'headers_too_large',
  'internal_error',
  'not_implemented',
  'resource_unreachable',
  'tunnel_not_connected',
  'tunnel_upstream_error',
  /** The database does not answer; retried for idempotent calls. */
  'service_unavailable',
  /** The service is at capacity and refused the call; `retryAfterSeconds` says when to come back. */
  'overloaded',
  'tunnel_timeout',
  /** The service could not be reached (connection refused or reset, DNS failure). */
  'network_error',
  /** No answer within the client's per-attempt timeout. */
  'timeout',
  /** An answer that is not the service's JSON error envelope (for example a proxy's HTML page). */
  'unexpected_response',
] as const;

/** The codes of BOT_PAY_ERROR_CODES; codes added by newer service versions still arrive as strings. */
export type BotPayErrorCode = (typeof BOT_PAY_ERROR_CODES)[number] | (string & {});

export interface BotPayErrorInit {
  status: number;
  code: BotPayErrorCode;
  message: string;
  retryAfterSeconds?: number | undefined;
  details?: Record<string, unknown>;
  requestId?: string | undefined;
  cause?: unknown;
}

export class BotPayError extends Error {
  /** HTTP status of the answer; 0 when no answer arrived (network_error, timeout). */
  readonly status: number;
  /** The spec's error code (`error` field of the body), e.g. `insufficient_funds`. */
  readonly code: BotPayErrorCode;
  /** Seconds the service asked us to wait (body `retry_after_seconds` or the Retry-After header). */
  readonly retryAfterSeconds: number | undefined;
  /** Every other field of the error body: `field`, `limit_usd`, `remaining_usd`, … */
  readonly details: Record<string, unknown>;
  /** The service's `x-request-id`, to quote when reporting a problem. */
  readonly requestId: string | undefined;

  constructor(init: BotPayErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'BotPayError';
    this.status = init.status;
    this.code = init.code;
    this.retryAfterSeconds = init.retryAfterSeconds;
    this.details = init.details ?? {};
    this.requestId = init.requestId;
  }

  /** The limit that was hit, in USD, when the service said (guardrail and budget errors). */
  get limitUsd(): number | undefined {
    return numberOrUndefined(this.details.limit_usd);
  }

  /** What remains of the limit, in USD, when the service said. */
  get remainingUsd(): number | undefined {
    return numberOrUndefined(this.details.remaining_usd);
  }

  /** The request field the service rejected (validation errors). */
  get field(): string | undefined {
    return typeof this.details.field === 'string' ? this.details.field : undefined;
  }

  /** True for failures that may succeed later without changing the request. */
  get transient(): boolean {
    return (
      this.status === 0 ||
      this.status === 429 ||
      this.status === 502 ||
      this.status === 503 ||
      this.status === 504
    );
  }

  /** True when the API key was missing, malformed, revoked or rotated. */
  get isAuthentication(): boolean {
    return this.status === 401 || this.code === 'Authentication required';
  }
}

export function isBotPayError(error: unknown, code?: BotPayErrorCode): error is BotPayError {
  return error instanceof BotPayError && (code === undefined || error.code === code);
}

function numberOrUndefined(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/** Builds the error for a non-2xx answer from its status, headers and (possibly non-JSON) body. */
export function errorFromResponse(status: number, headers: Headers, text: string): BotPayError {
  const requestId = headers.get('x-request-id') ?? undefined;
  const headerRetry = parseRetryAfter(headers.get('retry-after'));
  let body: unknown;
  try {
    body = text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (
    body &&
    typeof body === 'object' &&
    !Array.isArray(body) &&
    typeof (body as { error?: unknown }).error === 'string'
  ) {
    const { error, message, retry_after_seconds, ...details } = body as Record<string, unknown>;
    const retryAfter =
      typeof retry_after_seconds === 'number' && retry_after_seconds >= 0 ? retry_after_seconds : headerRetry;
    return new BotPayError({
      status,
      code: error as string,
      message: typeof message === 'string' ? message : (error as string),
      retryAfterSeconds: retryAfter,
      details,
      requestId,
    });
  }
  return new BotPayError({
    status,
    code: status === 503 ? 'service_unavailable' : status === 429 ? 'rate_limited' : 'unexpected_response',
    message: `The service answered HTTP ${status} without an error body.`,
    retryAfterSeconds: headerRetry,
    details: text.length > 0 ? { body: text.slice(0, 500) } : {},
    requestId,
  });
}

/** Retry-After in seconds (delta-seconds form; an HTTP date is converted against the local clock). */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed);
  const at = Date.parse(trimmed);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, Math.ceil((at - now) / 1000));
}
