import type { WebhookEvent } from '../types.ts';

// Webhook signatures with Web Crypto (`crypto.subtle`), so that they work wherever the main entry
// runs: browsers, edge runtimes (Cloudflare Workers, Vercel Edge, Deno, Bun) and Node ≥ 20 alike.
// Asynchronous, as Web Crypto is. The synchronous equivalents on node:crypto are in ./verify.ts
// (`@botpay/client/webhooks`); both read and check the headers with the helpers below, and a test
// holds them to the same answers. docs/webhooks.md: X-Service-Signature = "sha256=" +
// hex(HMAC-SHA256(raw body, webhook_secret)); Standard Webhooks: `webhook-signature` = "v1," +
// base64(HMAC-SHA256(`${id}.${timestamp}.` + raw body, base64-decoded secret after "whsec_").

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

export type HeaderValue = string | readonly string[] | null | undefined;

export interface StandardHeaders {
  'webhook-id'?: HeaderValue;
  'webhook-timestamp'?: HeaderValue;
  'webhook-signature'?: HeaderValue;
}

const SERVICE_SIGNATURE = /^sha256=([0-9a-fA-F]{64})$/;

/** The 32 bytes of an `X-Service-Signature` header, or undefined when missing, repeated or malformed. */
export function serviceSignatureBytes(header: HeaderValue): Uint8Array | undefined {
  if (typeof header !== 'string') return undefined;
  const hex = SERVICE_SIGNATURE.exec(header.trim())?.[1];
  if (!hex) return undefined;
  const bytes = new Uint8Array(32);
  for (let i = 0; i < 32; i++) bytes[i] = Number.parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  return bytes;
}

/**
 * Base64 to bytes the way Node's Buffer reads it (the service keys its signatures with Buffer):
 * standard or URL alphabet, other characters skipped, decoding ends at the first "=", a lone
 * trailing character ignored. Never throws.
 */
export function base64Bytes(text: string): Uint8Array {
  const stop = text.indexOf('=');
  const body = (stop === -1 ? text : text.slice(0, stop))
    .replace(/-/g, '+')
    .replace(/_/g, '/')
    .replace(/[^A-Za-z0-9+/]/g, '');
  const usable = body.length % 4 === 1 ? body.slice(0, -1) : body;
  const binary = atob(usable.padEnd(Math.ceil(usable.length / 4) * 4, '='));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

function bytesBase64(bytes: Uint8Array): string {
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

/** The HMAC key bytes of a Standard Webhooks secret (`whsec_<base64>`); empty when it holds none. */
export function standardKeyBytes(secret: string): Uint8Array {
  return base64Bytes(secret.startsWith('whsec_') ? secret.slice(6) : secret);
}

/** The keys of the secrets that hold one (a secret that decodes to nothing verifies nothing). */
export function standardKeys(secret: string | readonly string[]): Uint8Array[] {
  return secretList(secret)
    .map(standardKeyBytes)
    .filter((key) => key.length > 0);
}

/** The key to sign with; throws when the secret decodes to no bytes. */
export function standardSigningKey(secret: string): Uint8Array {
  const key = standardKeyBytes(secret);
  if (key.length === 0) throw new TypeError('The webhook secret holds no key (expected whsec_<base64>).');
  return key;
}

/** The Standard Webhooks headers read and their timestamp checked; the signatures still to verify. */
export type StandardCheck =
  | { failure: StandardVerifyFailure }
  | { failure?: undefined; signedPrefix: string; signatures: Uint8Array[] };

export function checkStandardHeaders(
  headers: StandardHeaders,
  options: StandardVerifyOptions = {},
): StandardCheck {
  const single = (value: HeaderValue) => (typeof value === 'string' ? value : undefined);
  const id = single(headers['webhook-id']);
  const timestamp = single(headers['webhook-timestamp']);
  const signatures = single(headers['webhook-signature']);
  if (!id || !timestamp || !signatures) return { failure: 'missing_headers' };
  if (!/^\d{1,12}$/.test(timestamp)) return { failure: 'invalid_timestamp' };
  const seconds = Number(timestamp);
  const nowSeconds = Math.floor((options.now ?? Date.now)() / 1000);
  const tolerance = options.toleranceSeconds ?? DEFAULT_TIMESTAMP_TOLERANCE_SECONDS;
  if (Math.abs(nowSeconds - seconds) > tolerance) return { failure: 'timestamp_out_of_tolerance' };
  const given = signatures
    .split(' ')
    .filter((part) => part.startsWith('v1,'))
    .map((part) => base64Bytes(part.slice(3)));
  return { signedPrefix: `${id}.${seconds}.`, signatures: given };
}

export function secretList(secret: string | readonly string[]): string[] {
  return (typeof secret === 'string' ? [secret] : [...secret]).filter(
    (s) => typeof s === 'string' && s.length > 0,
  );
}

const encoder = new TextEncoder();

function bytesOf(data: string | Uint8Array): Uint8Array<ArrayBuffer> {
  return typeof data === 'string' ? encoder.encode(data) : new Uint8Array(data);
}

function concat(prefix: string, body: string | Uint8Array): Uint8Array<ArrayBuffer> {
  const head = encoder.encode(prefix);
  const tail = bytesOf(body);
  const out = new Uint8Array(head.length + tail.length);
  out.set(head);
  out.set(tail, head.length);
  return out;
}

function hmacKey(key: Uint8Array, usage: 'sign' | 'verify'): Promise<CryptoKey> {
  return globalThis.crypto.subtle.importKey(
    'raw',
    new Uint8Array(key),
    { name: 'HMAC', hash: 'SHA-256' },
    false,
    [usage],
  );
}

async function hmac(key: Uint8Array, data: Uint8Array<ArrayBuffer>): Promise<Uint8Array> {
  return new Uint8Array(await globalThis.crypto.subtle.sign('HMAC', await hmacKey(key, 'sign'), data));
}

/** True when one of `signatures` is the HMAC of `data` under one of `keys` (Web Crypto compares in constant time). */
async function anyValid(
  keys: Uint8Array[],
  signatures: Uint8Array[],
  data: Uint8Array<ArrayBuffer>,
): Promise<boolean> {
  let valid = false;
  // Every pair is checked (no early exit), so timing does not tell which secret matched.
  for (const key of keys) {
    const cryptoKey = await hmacKey(key, 'verify');
    for (const sig of signatures) {
      if (await globalThis.crypto.subtle.verify('HMAC', cryptoKey, new Uint8Array(sig), data)) valid = true;
    }
  }
  return valid;
}

/** The X-Service-Signature value for `rawBody` (Web Crypto; `signPayload` is the synchronous one). */
export async function signPayloadAsync(rawBody: string | Uint8Array, secret: string): Promise<string> {
  const mac = await hmac(encoder.encode(secret), bytesOf(rawBody));
  return `sha256=${Array.from(mac, (b) => b.toString(16).padStart(2, '0')).join('')}`;
}

/**
 * True when `header` (X-Service-Signature) is a valid signature of exactly these bytes with
 * `secret`, or one of several secrets (old and new while a rotation settles). Web Crypto: for
 * browsers and edge runtimes; `verifySignature` in `@botpay/client/webhooks` is the synchronous
 * one. Pass the raw bytes as received: a re-serialised JSON body will not verify.
 */
export async function verifySignatureAsync(
  rawBody: string | Uint8Array,
  header: HeaderValue,
  secret: string | readonly string[],
): Promise<boolean> {
  const given = serviceSignatureBytes(header);
  if (!given) return false;
  const keys = secretList(secret).map((s) => encoder.encode(s));
  return anyValid(keys, [given], bytesOf(rawBody));
}

/** The Standard Webhooks signature `v1,<base64>` of these bytes (Web Crypto). */
export async function signStandardAsync(
  rawBody: string | Uint8Array,
  secret: string,
  id: string,
  timestampSeconds: number,
): Promise<string> {
  const mac = await hmac(standardSigningKey(secret), concat(`${id}.${timestampSeconds}.`, rawBody));
  return `v1,${bytesBase64(mac)}`;
}

/**
 * Checks the Standard Webhooks headers of a delivery (`webhook-id`, `webhook-timestamp`,
 * `webhook-signature`): the timestamp within the tolerance and at least one `v1` signature made
 * with one of `secret`. Resolves to null when valid, else the reason. Web Crypto;
 * `verifyStandardWebhook` in `@botpay/client/webhooks` is the synchronous one.
 */
export async function verifyStandardWebhookAsync(
  rawBody: string | Uint8Array,
  headers: StandardHeaders,
  secret: string | readonly string[],
  options: StandardVerifyOptions = {},
): Promise<StandardVerifyFailure | null> {
  const check = checkStandardHeaders(headers, options);
  if (check.failure) return check.failure;
  const keys = standardKeys(secret);
  return (await anyValid(keys, check.signatures, concat(check.signedPrefix, rawBody)))
    ? null
    : 'invalid_signature';
}

export interface VerifyRequestOptions extends StandardVerifyOptions {
  /** Accept a delivery that has only X-Service-Signature (no Standard Webhooks timestamp). Default false. */
  allowUnsignedTimestamp?: boolean;
}

export type VerifiedRequest =
  | { ok: true; event: WebhookEvent; rawBody: string }
  | { ok: false; reason: StandardVerifyFailure | 'invalid_json' };

/**
 * Verifies a webhook delivery that arrived as a Fetch API `Request` (Cloudflare Workers, Deno,
 * Bun, Next.js and other edge route handlers) and parses it. The rules are those of the Node
 * middleware: the Standard Webhooks headers are required (unless `allowUnsignedTimestamp`) and
 * checked, X-Service-Signature is checked whenever present. Reads the body once: pass the
 * request before anything else consumed it. No deduplication: keep the event ids you handled
 * (`event.id` is the same on every redelivery).
 */
export async function verifyWebhookRequest(
  request: Request,
  secret: string | readonly string[],
  options: VerifyRequestOptions = {},
): Promise<VerifiedRequest> {
  const rawBody = await request.text();
  const header = (name: string) => request.headers.get(name) ?? undefined;
  const hasStandard = header('webhook-signature') !== undefined;
  if (hasStandard) {
    const failure = await verifyStandardWebhookAsync(
      rawBody,
      {
        'webhook-id': header('webhook-id'),
        'webhook-timestamp': header('webhook-timestamp'),
        'webhook-signature': header('webhook-signature'),
      },
      secret,
      options,
    );
    if (failure) return { ok: false, reason: failure };
  } else if (!options.allowUnsignedTimestamp) {
    return { ok: false, reason: 'missing_headers' };
  }
  const service = header('x-service-signature');
  if ((service !== undefined || !hasStandard) && !(await verifySignatureAsync(rawBody, service, secret))) {
    return { ok: false, reason: 'invalid_signature' };
  }
  try {
    const event = JSON.parse(rawBody) as WebhookEvent;
    if (typeof event !== 'object' || event === null || typeof event.id !== 'string') {
      return { ok: false, reason: 'invalid_json' };
    }
    return { ok: true, event, rawBody };
  } catch {
    return { ok: false, reason: 'invalid_json' };
  }
}
