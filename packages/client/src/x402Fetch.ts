// Requesting an x402 resource through the service (POST /api/v1/bot/x402/fetch): the service makes
// the request, pays a 402 under the owner's guardrails and returns the resource. The owner's domain
// and pay-to lists are judged on the connection the service made itself. `x402FetchResponse` turns
// the answer into a standard Response.

import type { BotOperations } from './generated.ts';

export type X402FetchRequest = BotOperations['POST /api/v1/bot/x402/fetch']['body'];

/** The resource and what was paid for it. */
export type X402FetchAnswer = BotOperations['POST /api/v1/bot/x402/fetch']['responses'][200];

/** Held for the owner: send the same request with `payment_id` once the payment is approved. */
export type X402FetchPending = BotOperations['POST /api/v1/bot/x402/fetch']['responses'][202];

export type X402FetchResult = X402FetchAnswer | X402FetchPending;

export type X402RefusalReport = BotOperations['POST /api/v1/bot/x402/payments/{payment_id}/refusal']['body'];

export type X402RefusalAnswer =
  BotOperations['POST /api/v1/bot/x402/payments/{payment_id}/refusal']['responses'][200];

/** True when the answer carries the resource (not a payment held for the owner). */
export function isX402FetchAnswer(result: X402FetchResult): result is X402FetchAnswer {
  return 'response' in result;
}

/** The resource of an answer as a standard Response (status, headers, body). */
export function x402FetchResponse(answer: X402FetchAnswer): Response {
  const r = answer.response;
  const body =
    r.body_text !== undefined
      ? r.body_text
      : Uint8Array.from(atob(r.body_base64 ?? ''), (c) => c.charCodeAt(0));
  const nullBody = r.status === 204 || r.status === 205 || r.status === 304 || r.status < 200;
  return new Response(nullBody ? null : body, { status: r.status, headers: r.headers });
}
