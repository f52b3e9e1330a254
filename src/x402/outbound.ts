import type { Agent } from 'undici';
import { isDevelopmentBaseUrl } from '../config.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError, validationError } from '../platform/errors.ts';
import {
  assertLiteralAllowed,
  ForbiddenTargetError,
  guardedLookup,
  systemResolver,
} from '../webhooks/ssrf.ts';
import { describeError } from '../webhooks/sender.ts';

// Requests the service makes to x402 resources itself: POST /api/v1/bot/x402/fetch (src/x402/fetch.ts)
// and the check of a named resource in sign mode when the owner keeps domain lists (probeClaim,
// src/x402/service.ts). The webhook SSRF rules apply (src/webhooks/ssrf.ts): literal IPs are judged
// before the request, host names inside the socket's own DNS lookup, so the address checked is the
// address connected to; redirects are never followed (a redirect is answered to the bot as it is);
// ALLOW_PRIVATE_WEBHOOK_TARGETS (development and tests) allows private and loopback addresses as it
// does for webhooks. Plain http is accepted only where plain-http callbacks are (development).
// undici loads with the first such request.

/** The longest the service waits for a resource (connect, headers and the whole body). */
export const RESOURCE_TIMEOUT_MS = 30_000;
/** The most of a resource's body the service reads and returns; the rest is cut (`truncated`). */
export const MAX_RESOURCE_BYTES = 1024 * 1024;
export const OUTBOUND_USER_AGENT = 'botpay-x402/1';

export interface OutboundRequest {
  url: URL;
  method: string;
  headers: Record<string, string>;
  body?: Buffer | undefined;
}

export interface OutboundResponse {
  status: number;
  /** Header names in lower case; repeated fields joined with ", ". */
  headers: Record<string, string>;
  body: Buffer;
  truncated: boolean;
}

/** An absolute http(s) URL without credentials; plain http only in development. */
export function resourceTarget(ctx: AppContext, raw: string, field: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw validationError(`${field} must be an absolute URL.`, { field });
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw validationError(`${field} must use http or https.`, { field });
  }
  if (url.username || url.password)
    throw validationError(`${field} must not contain credentials.`, { field });
  const development = ctx.config.allowPrivateWebhookTargets || isDevelopmentBaseUrl(ctx.config);
  if (url.protocol === 'http:' && !development) {
    throw validationError(`${field} must use https: the service binds the domain only over TLS.`, { field });
  }
  return url;
}

let agents: Map<boolean, Promise<Agent>> | undefined;

function agentFor(allowPrivate: boolean): Promise<Agent> {
  agents ??= new Map();
  let agent = agents.get(allowPrivate);
  if (!agent) {
    agent = import('undici').then(
      ({ Agent }) =>
        new Agent({
          keepAliveTimeout: 10_000,
          connect: {
            timeout: RESOURCE_TIMEOUT_MS,
            ...(allowPrivate ? {} : { lookup: guardedLookup(systemResolver) }),
          },
        }),
    );
    agents.set(allowPrivate, agent);
  }
  return agent;
}

/** Sends one request to a resource; refusals of the SSRF guard are 403, other failures 502. */
export async function sendOutbound(
  ctx: AppContext,
  req: OutboundRequest,
  options: { maxBytes?: number; timeoutMs?: number } = {},
): Promise<OutboundResponse> {
  const allowPrivate = ctx.config.allowPrivateWebhookTargets;
  const maxBytes = options.maxBytes ?? MAX_RESOURCE_BYTES;
  const timeoutMs = options.timeoutMs ?? RESOURCE_TIMEOUT_MS;
  const host = req.url.hostname;
  try {
    if (!allowPrivate) assertLiteralAllowed(host);
    const agent = await agentFor(allowPrivate);
    const res = await agent.request({
      origin: req.url.origin,
      path: `${req.url.pathname}${req.url.search}`,
      method: req.method as 'GET',
      headers: { 'user-agent': OUTBOUND_USER_AGENT, ...req.headers },
      body: req.body ?? null,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: AbortSignal.timeout(timeoutMs),
    });
    const chunks: Buffer[] = [];
    let size = 0;
    let truncated = false;
    for await (const chunk of res.body) {
      const b = chunk as Buffer;
      if (size + b.length > maxBytes) {
        chunks.push(b.subarray(0, maxBytes - size));
        size = maxBytes;
        truncated = true;
        res.body.destroy();
        break;
      }
      chunks.push(b);
      size += b.length;
    }
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(res.headers)) {
      if (value === undefined) continue;
      headers[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : value;
    }
    return { status: res.statusCode, headers, body: Buffer.concat(chunks, size), truncated };
  } catch (error) {
    const forbidden = findForbidden(error);
    if (forbidden) {
      throw new ApiError(
        'destination_not_allowed',
        `The service does not connect to ${host}: ${forbidden.message.replace(/; set .*$/, '')}.`,
      );
    }
    throw new ApiError(
      'resource_unreachable',
      `Could not reach ${req.url.origin}: ${describeError(error, timeoutMs)}.`,
    );
  }
}

function findForbidden(error: unknown): ForbiddenTargetError | null {
  let e: unknown = error;
  for (let depth = 0; depth < 5 && e; depth++) {
    if (e instanceof ForbiddenTargetError) return e;
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}

/** The payment requirements a 402 carries: the PAYMENT-REQUIRED header (v2), else a v1 JSON body. */
export interface PaymentRequired {
  x402Version: number;
  accepts: unknown[];
  resource?: { url?: string; description?: string; mimeType?: string } | undefined;
  error?: string | undefined;
}

export function readPaymentRequired(res: OutboundResponse): PaymentRequired | null {
  const header = res.headers['payment-required'];
  let parsed: unknown;
  try {
    parsed = header
      ? JSON.parse(Buffer.from(header.trim(), 'base64').toString('utf8'))
      : JSON.parse(res.body.toString('utf8'));
  } catch {
    return null;
  }
  if (typeof parsed !== 'object' || parsed === null) return null;
  const p = parsed as Record<string, unknown>;
  if (!Array.isArray(p.accepts) || p.accepts.length === 0) return null;
  const resource = typeof p.resource === 'object' && p.resource !== null ? p.resource : undefined;
  return {
    x402Version: typeof p.x402Version === 'number' ? p.x402Version : header ? 2 : 1,
    accepts: p.accepts,
    resource: resource as PaymentRequired['resource'],
    error: typeof p.error === 'string' ? p.error : undefined,
  };
}

/** What a seller's answer to a paid request says: taken, refused (with why), or neither for sure. */
export function sellerOutcome(res: OutboundResponse): {
  outcome: 'accepted' | 'refused' | 'unknown';
  reason: string | null;
} {
  const settle = res.headers['payment-response'] ?? res.headers['x-payment-response'];
  if (settle) {
    try {
      const s = JSON.parse(Buffer.from(settle.trim(), 'base64').toString('utf8')) as {
        success?: unknown;
        errorReason?: unknown;
      };
      if (s.success === false) {
        return {
          outcome: 'refused',
          reason: typeof s.errorReason === 'string' ? s.errorReason : 'settle_failed',
        };
      }
      if (s.success === true) return { outcome: 'accepted', reason: null };
    } catch {
      // An unreadable settlement header says nothing either way.
    }
  }
  if (res.status === 402) {
    // The seller asks for payment again: it did not take this one.
    return { outcome: 'refused', reason: readPaymentRequired(res)?.error ?? 'payment_required_again' };
  }
  if (res.status < 400) return { outcome: 'accepted', reason: null };
  return { outcome: 'unknown', reason: null };
}
