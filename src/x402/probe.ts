import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import { microsToUsd } from '../platform/money.ts';
import { readPaymentRequired, resourceTarget, sendOutbound } from './outbound.ts';
import { type CheckedRequirement, offersSamePayment } from './requirements.ts';
import { requireX402Config } from './wallet.ts';

// Sign mode under the owner's domain lists (src/x402/service.ts): the bot names a resource on an
// allowed host and hands over requirements. The service cannot see where the signed payment will
// be sent, so it checks the claim itself: it requests the named resource (GET, no payment, the
// webhook SSRF rules) and pays only when that 402 asks for exactly this payment. A bot naming an
// allowed host while handing over another seller's requirements is refused here.

const PROBE_TIMEOUT_MS = 10_000;
const PROBE_MAX_BYTES = 64 * 1024;
const USE_FETCH = 'Use POST /api/v1/bot/x402/fetch, where the service makes the request itself.';

export async function probeClaim(ctx: AppContext, resourceUrl: string, chosen: CheckedRequirement) {
  const cfg = requireX402Config(ctx);
  const url = resourceTarget(ctx, resourceUrl, 'resource_url');
  const res = await sendOutbound(
    ctx,
    { url, method: 'GET', headers: { accept: 'application/json' } },
    { maxBytes: PROBE_MAX_BYTES, timeoutMs: PROBE_TIMEOUT_MS },
  );
  const host = url.hostname.toLowerCase();
  if (res.status !== 402) {
    throw new ApiError(
      'destination_not_allowed',
      `The owner allows payments only to listed domains, and ${host} did not ask for a payment when the service requested ${url.origin}${url.pathname} (HTTP ${res.status}). ${USE_FETCH}`,
      { domain_check: 'probed', resource_status: res.status },
    );
  }
  const required = readPaymentRequired(res);
  if (!required || !(await offersSamePayment(cfg, required.accepts, chosen))) {
    throw new ApiError(
      'destination_not_allowed',
      `${host} does not ask for this payment ($${microsToUsd(chosen.amountMicros)} to ${chosen.payTo}): the requirements are not the ones its 402 offers. ${USE_FETCH}`,
      { domain_check: 'probed' },
    );
  }
}
