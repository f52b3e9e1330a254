import { createHmac, timingSafeEqual } from 'node:crypto';

// docs/webhooks.md: X-Service-Signature = "sha256=" + hex(HMAC-SHA256(raw body, webhook_secret)).

const HEADER_PATTERN = /^sha256=([0-9a-fA-F]{64})$/;

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
  header: string | readonly string[] | null | undefined,
  secret: string | readonly string[],
): boolean {
  if (typeof header !== 'string') return false;
  const match = HEADER_PATTERN.exec(header.trim());
  if (!match) return false;
  const given = Buffer.from(match[1]!.toLowerCase(), 'hex');
  const secrets = typeof secret === 'string' ? [secret] : secret;
  let valid = false;
  // Check every secret (no early exit) so timing does not reveal which one matched.
  for (const candidate of secrets) {
    if (typeof candidate !== 'string' || candidate.length === 0) continue;
    const expected = createHmac('sha256', candidate).update(rawBody).digest();
    if (timingSafeEqual(expected, given)) valid = true;
  }
  return valid;
}
