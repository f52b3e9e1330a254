// Paying HTTP 402 ("x402") resources from the bot's partner wallet. The bot never holds the
// wallet's key: it hands the 402 response's payment requirements to the service, which checks its
// owner's guardrails and signs (or holds the payment for the owner), and retries the request with
// the PAYMENT-SIGNATURE header the service returned.

import { BotPayError } from './errors.ts';
import type { BotOperations } from './generated.ts';

/** One entry of a 402 response's `accepts` list: x402 v2 (`amount`) or v1 (`maxAmountRequired`, `resource`). */
export interface X402PaymentRequirements {
  scheme: string;
  network: string;
  asset: string;
  /** x402 v2: atomic units. */
  amount?: string;
  /** x402 v1: atomic units. */
  maxAmountRequired?: string;
  payTo: string;
  maxTimeoutSeconds: number;
  extra?: Record<string, unknown>;
  [key: string]: unknown;
}

/** The decoded body of a 402 response (the PAYMENT-REQUIRED header, or the JSON body). */
export interface X402PaymentRequired {
  x402Version: number;
  error?: string;
  resource?: { url?: string; description?: string; mimeType?: string; [key: string]: unknown };
  accepts: X402PaymentRequirements[];
  [key: string]: unknown;
}

export interface X402PayRequest {
  resource_url: string;
  payment_requirements: X402PaymentRequirements | X402PaymentRequirements[];
  resource?: { url?: string; description?: string; mimeType?: string };
  description?: string;
}

export type X402PayApproved = BotOperations['POST /api/v1/bot/x402/pay']['responses'][200];

export type X402PayPending = BotOperations['POST /api/v1/bot/x402/pay']['responses'][202];

export type X402PayResult = X402PayApproved | X402PayPending;

export type X402PaymentStatus = BotOperations['GET /api/v1/bot/x402/payments/{payment_id}']['responses'][200];

function decodeBase64Json(value: string): unknown {
  const binary = atob(value.trim());
  const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  return JSON.parse(new TextDecoder().decode(bytes));
}

/** The payment requirements of a 402 response: the PAYMENT-REQUIRED header (v2), else the JSON body. */
export async function readPaymentRequired(res: Response): Promise<X402PaymentRequired> {
  const header = res.headers.get('payment-required');
  let parsed: unknown;
  try {
    parsed = header ? decodeBase64Json(header) : await res.json();
  } catch (cause) {
    throw new BotPayError({
      status: res.status,
      code: 'unexpected_response',
      message: 'The 402 response carries no readable payment requirements.',
      cause,
    });
  }
  const accepts = (parsed as { accepts?: unknown }).accepts;
  if (!Array.isArray(accepts) || accepts.length === 0) {
    throw new BotPayError({
      status: res.status,
      code: 'unexpected_response',
      message: 'The 402 response lists no payment requirements (accepts).',
    });
  }
  return parsed as X402PaymentRequired;
}

/** The slice of BotPayClient that fetchWithX402 needs. */
export interface X402Payer {
  payX402(request: X402PayRequest, options?: { signal?: AbortSignal }): Promise<X402PayResult>;
  waitForX402Payment(
    paymentId: string,
    options?: { signal?: AbortSignal; maxWaitMs?: number },
  ): Promise<X402PaymentStatus>;
  /** Tells the service the seller refused the payment (it checks the chain before releasing anything). */
  reportX402Refusal?(
    paymentId: string,
    report: { reason?: string; seller_status?: number },
  ): Promise<unknown>;
}

/** Whether a seller's answer to a paid request refuses the payment, and why. */
function sellerRefusal(res: Response): { reason: string } | null {
  const settle = res.headers.get('payment-response') ?? res.headers.get('x-payment-response');
  if (settle) {
    try {
      const s = decodeBase64Json(settle) as { success?: unknown; errorReason?: unknown };
      if (s.success === false)
        return { reason: typeof s.errorReason === 'string' ? s.errorReason : 'settle_failed' };
      if (s.success === true) return null;
    } catch {
      // An unreadable settlement header says nothing either way.
    }
  }
  if (res.status !== 402) return null;
  const required = res.headers.get('payment-required');
  if (required) {
    try {
      const p = decodeBase64Json(required) as { error?: unknown };
      if (typeof p.error === 'string') return { reason: p.error };
    } catch {
      // No reason given.
    }
  }
  return { reason: 'payment_required_again' };
}

export interface FetchWithX402Options {
  /** The fetch used for the resource. Default: the global fetch. */
  fetch?: typeof fetch;
  /** Wait for the owner when the payment is held (default true); false rejects with `payment_held`. */
  waitForApproval?: boolean;
  /** Gives up waiting for the owner after this many ms. */
  maxWaitMs?: number;
  /** Called with the service's answer before the retry (for logging). */
  onPayment?: (payment: X402PayResult | X402PaymentStatus) => void;
  signal?: AbortSignal;
}

/**
 * Fetches `url`; when it answers 402, asks the service to pay (its guardrails, possibly the
 * owner's approval) and repeats the request once with the payment header (PAYMENT-SIGNATURE, or
 * X-PAYMENT for an x402 v1 seller). Resolves with the final Response (check `ok`: a resource
 * server can still refuse; such a refusal is reported to the service, which releases the payment
 * at once when the chain shows it can never be used). A refusal by the service rejects with its
 * BotPayError (`rail_guardrail_violation`, `destination_not_allowed`, …).
 */
export async function fetchWithX402(
  payer: X402Payer,
  url: string,
  init: RequestInit = {},
  options: FetchWithX402Options = {},
): Promise<Response> {
  const fetchImpl = options.fetch ?? globalThis.fetch;
  const signal = options.signal ?? init.signal ?? undefined;
  const first = await fetchImpl(url, { ...init, ...(signal ? { signal } : {}) });
  if (first.status !== 402) return first;
  const required = await readPaymentRequired(first);
  const payment = await payer.payX402(
    {
      resource_url: url,
      payment_requirements: required.accepts,
      ...(required.resource?.description ? { description: required.resource.description } : {}),
    },
    signal ? { signal } : {},
  );
  options.onPayment?.(payment);
  let header: string | undefined;
  let headerName: string = payment.approved ? payment.payment_header_name : 'PAYMENT-SIGNATURE';
  if (payment.approved) header = payment.payment_header;
  else {
    if (options.waitForApproval === false) {
      throw new BotPayError({
        status: 202,
        code: 'payment_held',
        message: `The payment ${payment.payment_id} is held for the owner's approval until ${payment.expires_at}.`,
      });
    }
    const decided = await payer.waitForX402Payment(payment.payment_id, {
      ...(signal ? { signal } : {}),
      ...(options.maxWaitMs !== undefined ? { maxWaitMs: options.maxWaitMs } : {}),
    });
    options.onPayment?.(decided);
    if (decided.status !== 'approved' || !decided.payment_header) {
      throw new BotPayError({
        status: 403,
        code: decided.status === 'denied' ? 'payment_denied' : 'payment_expired',
        message: decided.message,
      });
    }
    header = decided.payment_header;
    headerName = decided.payment_header_name ?? headerName;
  }
  const headers = new Headers(init.headers);
  headers.set(headerName, header);
  const paid = await fetchImpl(url, { ...init, headers, ...(signal ? { signal } : {}) });
  const refusal = sellerRefusal(paid);
  if (refusal && payer.reportX402Refusal) {
    // Best effort: the service checks the chain itself; the answer goes to the caller unchanged.
    await payer
      .reportX402Refusal(payment.payment_id, { reason: refusal.reason.slice(0, 200) })
      .catch(() => {});
  }
  return paid;
}
