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
  const given = Buffer.from((match[1] ?? '').toLowerCase(), 'hex');
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

/** Default tolerance of `webhook-timestamp` against the receiver's clock, in seconds (5 minutes). */
export const DEFAULT_TIMESTAMP_TOLERANCE_SECONDS = 300;

export type StandardVerifyFailure =
  | 'missing_headers'
  | 'invalid_timestamp'
  | 'timestamp_out_of_tolerance'
  | 'invalid_signature';

export interface StandardVerifyOptions {
  /** Seconds a delivery's timestamp may differ from now. Default 300. */
  toleranceSeconds?: number;
  /** Milliseconds since the epoch. Default Date.now. */
  now?: () => number;
}

type HeaderValue = string | readonly string[] | null | undefined;

function single(value: HeaderValue): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

function standardKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64');
}

/** The Standard Webhooks signature `v1,<base64>` of these bytes (for tests and local tools). */
export function signStandard(
  rawBody: string | Uint8Array,
  secret: string,
  id: string,
  timestampSeconds: number,
): string {
  const mac = createHmac('sha256', standardKey(secret)).update(`${id}.${timestampSeconds}.`).update(rawBody);
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
  headers: {
    'webhook-id'?: HeaderValue;
    'webhook-timestamp'?: HeaderValue;
    'webhook-signature'?: HeaderValue;
  },
  secret: string | readonly string[],
  options: StandardVerifyOptions = {},
): StandardVerifyFailure | null {
  const id = single(headers['webhook-id']);
  const timestamp = single(headers['webhook-timestamp']);
  const signatures = single(headers['webhook-signature']);
  if (!id || !timestamp || !signatures) return 'missing_headers';
  if (!/^\d{1,12}$/.test(timestamp)) return 'invalid_timestamp';
  const seconds = Number(timestamp);
  const nowSeconds = Math.floor((options.now ?? Date.now)() / 1000);
  const tolerance = options.toleranceSeconds ?? DEFAULT_TIMESTAMP_TOLERANCE_SECONDS;
  if (Math.abs(nowSeconds - seconds) > tolerance) return 'timestamp_out_of_tolerance';
  const secrets = typeof secret === 'string' ? [secret] : secret;
  const given = signatures
    .split(' ')
    .filter((part) => part.startsWith('v1,'))
    .map((part) => Buffer.from(part.slice(3), 'base64'));
  let valid = false;
  for (const candidate of secrets) {
    if (typeof candidate !== 'string' || candidate.length === 0) continue;
    const expected = createHmac('sha256', standardKey(candidate))
      .update(`${id}.${seconds}.`)
      .update(rawBody)
      .digest();
    for (const sig of given) {
      if (sig.length === expected.length && timingSafeEqual(sig, expected)) valid = true;
    }
  }
  return valid ? null : 'invalid_signature';
}
