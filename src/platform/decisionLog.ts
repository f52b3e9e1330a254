import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ErrorCode } from './errors.ts';

// What a request decided, at `debug` (LOG_LEVEL=debug or trace; docs/deploy.md, Logs): one line per
// answered API request with its route, status and outcome — for a refusal the error code, the step
// of the guardrail chain that refused and the limit figures; for a checkout or x402 payment whether
// it was approved or held for the owner. Only the fields listed here are written: no body, no
// header, no answer (an approved checkout's answer carries card digits), so nothing secret. Fastify
// logs each request's method, URL and timing at `info` already; this says what came of it.

/** The step of the guardrail chain (or of the request) each refusal comes from. */
const STEP: Partial<Record<ErrorCode, string>> = {
  'Authentication required': 'authentication',
  validation_error: 'validation',
  rate_limited: 'rate limit',
  idempotency_conflict: 'idempotency key',
  wallet_not_active: 'wallet status',
  wallet_frozen: 'wallet status',
  card_not_found: 'card',
  card_not_active: 'card',
  card_id_required: 'card',
  invalid_profile: 'profile',
  card_guardrail_violation: 'card guardrails',
  allowance_exceeded: 'profile allowance',
  master_budget_exceeded: 'master guardrails',
  insufficient_funds: 'balance',
  rail_not_active: 'partner wallet rail',
  rail_not_configured: 'partner wallet rail',
  rail_guardrail_violation: 'partner wallet guardrails',
  destination_not_allowed: 'partner wallet lists',
  not_pending: 'decision',
};

/** Refusal details that are figures or names, never secrets; anything else is left out. */
const SAFE_DETAILS = new Set([
  'field',
  'limit',
  'window',
  'limit_usd',
  'remaining_usd',
  'balance_usd',
  'retry_after_seconds',
  'status',
  'max_depth',
]);

/** Outcomes of the routes whose 2xx answers are decisions. */
const DECIDED: Record<string, Record<number, string>> = {
  'POST /api/v1/bot/merchant/checkout': { 200: 'approved', 202: 'held for the owner' },
  'POST /api/v1/bot/x402/pay': { 200: 'paid', 202: 'held for the owner' },
};

interface Refusal {
  code: string;
  details: Record<string, unknown>;
}

const refusals = new WeakMap<FastifyRequest, Refusal>();

/** The error handler notes what it refused, for the decision line. */
export function noteRefusal(
  request: FastifyRequest,
  code: string,
  details: Record<string, unknown> = {},
): void {
  refusals.set(request, { code, details });
}

/** The `onResponse` part: one debug line per API request (not for static files or pages). */
export function logDecision(request: FastifyRequest, reply: FastifyReply): void {
  if (request.log.level !== 'debug' && request.log.level !== 'trace') return;
  const route = request.routeOptions.url;
  if (route === undefined || !route.startsWith('/api/')) return;
  const operation = `${request.method} ${route}`;
  const status = reply.statusCode;
  const refusal = refusals.get(request);
  if (refusal) {
    const details: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(refusal.details)) {
      if (SAFE_DETAILS.has(key)) details[key] = value;
    }
    request.log.debug(
      {
        decision: {
          route: operation,
          status,
          outcome: 'refused',
          error: refusal.code,
          step: STEP[refusal.code as ErrorCode] ?? 'request',
          ...(Object.keys(details).length > 0 ? { details } : {}),
        },
      },
      `refused: ${refusal.code}`,
    );
    return;
  }
  const outcome = DECIDED[operation]?.[status] ?? (status < 400 ? 'done' : 'refused');
  request.log.debug({ decision: { route: operation, status, outcome } }, outcome);
}
