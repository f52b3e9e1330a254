import { createHmac, timingSafeEqual } from 'node:crypto';
import {
  checkStandardHeaders,
  type HeaderValue,
  type StandardHeaders,
  type StandardVerifyFailure,
  type StandardVerifyOptions,
  secretList,
  serviceSignatureBytes,
  standardKeys,
  standardSigningKey,
} from './web.ts';

// The synchronous signature functions on node:crypto (`@botpay/client/webhooks`, and the Node
// middleware). The main entry has the Web Crypto ones (./web.ts: signPayloadAsync, …), which read
// the headers with the same helpers; a test holds both to the same answers.
// docs/webhooks.md: X-Service-Signature = "sha256=" + hex(HMAC-SHA256(raw body, webhook_secret)).

export {
  DEFAULT_TIMESTAMP_TOLERANCE_SECONDS,
  type StandardVerifyFailure,
  type StandardVerifyOptions,
} from './web.ts';

/** The X-Service-Signature value for `rawBody` (for tests and local tools). */
export function signPayload(rawBody: string | Uint8Array, secret: string): string {
  return `sha256=${createHmac('sha256', secret).update(rawBody).digest('hex')}`;
}

/**
 * True when `header` is a valid signature of exactly these bytes with `secret` (or with one of
 * several secrets, e.g. the old and new one while a rotation settles). Compares in constant time.
 * A missing header, a repeated header, or one not of the form `sha256=<64 hex>` is rejected.
 * Pass the raw bytes as received: a re-serialised JSON body will not verify.
 */
export function verifySignature(
  rawBody: string | Uint8Array,
  header: HeaderValue,
  secret: string | readonly string[],
): boolean {
  const given = serviceSignatureBytes(header);
  if (!given) return false;
  let valid = false;
  // Check every secret (no early exit) so timing does not reveal which one matched.
  for (const candidate of secretList(secret)) {
    const expected = createHmac('sha256', candidate).update(rawBody).digest();
    if (timingSafeEqual(expected, given)) valid = true;
  }
  return valid;
}

/** The Standard Webhooks signature `v1,<base64>` of these bytes (for tests and local tools). */
export function signStandard(
  rawBody: string | Uint8Array,
  secret: string,
  id: string,
  timestampSeconds: number,
): string {
  const mac = createHmac('sha256', standardSigningKey(secret))
    .update(`${id}.${timestampSeconds}.`)
    .update(rawBody);
  return `v1,${mac.digest('base64')}`;
}

/**
 * Checks the Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`) of
 * a delivery: the timestamp within the tolerance (a replayed old delivery is refused) and at least
 * one `v1` signature made with one of `secret`. Returns null when valid, else the reason.
 * Compares in constant time.
 */
export function verifyStandardWebhook(
  rawBody: string | Uint8Array,
  headers: StandardHeaders,
  secret: string | readonly string[],
  options: StandardVerifyOptions = {},
): StandardVerifyFailure | null {
  const check = checkStandardHeaders(headers, options);
  if (check.failure) return check.failure;
  let valid = false;
  for (const key of standardKeys(secret)) {
    const expected = createHmac('sha256', key).update(check.signedPrefix).update(rawBody).digest();
    for (const sig of check.signatures) {
      if (sig.length === expected.length && timingSafeEqual(sig, expected)) valid = true;
    }
  }
  return valid ? null : 'invalid_signature';
}
