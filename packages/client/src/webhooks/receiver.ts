import { createHash, timingSafeEqual } from 'node:crypto';
import type { WebhookEvent } from '../types.ts';
import { type StandardVerifyFailure, verifySignature, verifyStandardWebhook } from './verify.ts';

// The framework-independent part of every webhook middleware: given the raw bytes and headers of a
// delivery, decide the answer, and hand the event to the handler after the answer is sent
// (docs/webhooks.md: respond 2xx quickly, process asynchronously, deduplicate).

/** Remembers which event ids were already accepted. Replace the default with a shared store
 * (Redis, a database table) when several processes receive webhooks for one bot. */
export interface DedupeStore {
  /** Records `id`; resolves true when it was new, false when it had been seen. Must be atomic. */
  markIfNew(id: string): boolean | Promise<boolean>;
  /** Forgets `id` (called when the handler failed, so a redelivery is processed again). */
  forget(id: string): void | Promise<void>;
}

/** A bounded in-memory LRU of event ids: the most recent `capacity` ids are remembered. */
export class MemoryDedupeStore implements DedupeStore {
  private readonly seen = new Map<string, true>();
  constructor(readonly capacity = 10_000) {}

  markIfNew(id: string): boolean {
    if (this.seen.has(id)) {
      // Refresh its place: a duplicate is evidence the id is still live.
      this.seen.delete(id);
      this.seen.set(id, true);
      return false;
    }
    this.seen.set(id, true);
    while (this.seen.size > this.capacity) {
      const oldest = this.seen.keys().next().value;
      if (oldest === undefined) break;
      this.seen.delete(oldest);
    }
    return true;
  }

  forget(id: string): void {
    this.seen.delete(id);
  }

  get size(): number {
    return this.seen.size;
  }
}

export interface WebhookContext {
  /** X-Service-Event-Id header, or the body's id. */
  eventId: string;
  headers: Record<string, string | string[] | undefined>;
  rawBody: Buffer;
}

export interface WebhookReceiverOptions {
  /** The bot's webhook_secret (`whsec_…`); several during a rotation. */
  secret: string | readonly string[];
  /** Called once per new event, after the 2xx answer was sent. */
  onEvent: (event: WebhookEvent, context: WebhookContext) => void | Promise<void>;
  /** Called when onEvent throws or rejects. Default: console.error. */
  onError?: (error: unknown, event: WebhookEvent) => void;
  /** Deduplication by event id. Default: MemoryDedupeStore(10 000). `false` turns it off. */
  dedupe?: DedupeStore | false;
  /** Bodies above this many bytes are refused with 413. Default 1 MiB. */
  maxBodyBytes?: number;
  /**
   * For `primary` bots behind the managed tunnel: also require `Authorization: Bearer <token>`
   * (primary_hooks_token). Default: not checked.
   */
  hooksToken?: string;
  /**
   * Seconds a delivery's `webhook-timestamp` may differ from this machine's clock (replay
   * protection). Default 300.
   */
  toleranceSeconds?: number;
  /**
   * Accept deliveries that carry only `X-Service-Signature` (no Standard Webhooks headers, so no
   * timestamp: a captured delivery could be replayed later). For services older than the one that
   * sends `webhook-signature`. Default false.
   */
  allowUnsignedTimestamp?: boolean;
  /** Milliseconds since the epoch, for the tolerance check. Default Date.now. */
  now?: () => number;
}

export interface ReceiverAnswer {
  status: number;
  body: Record<string, unknown>;
  /** Runs the handler; call it after the answer has been written. */
  dispatch?: () => void;
}

export const DEFAULT_MAX_BODY_BYTES = 1_048_576;

export interface WebhookReceiver {
  readonly maxBodyBytes: number;
  handle(
    method: string | undefined,
    headers: Record<string, string | string[] | undefined>,
    rawBody: Buffer,
  ): Promise<ReceiverAnswer>;
}

export function createWebhookReceiver(options: WebhookReceiverOptions): WebhookReceiver {
  const secrets = typeof options.secret === 'string' ? [options.secret] : options.secret;
  if (secrets.length === 0 || secrets.some((s) => typeof s !== 'string' || s.length === 0)) {
    throw new TypeError('secret must be the webhook_secret returned at registration');
  }
  const dedupe = options.dedupe === false ? undefined : (options.dedupe ?? new MemoryDedupeStore());
  const onError =
    options.onError ??
    ((error: unknown, event: WebhookEvent) =>
      console.error(`webhook handler failed for ${event.id}:`, error));
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;

  return {
    maxBodyBytes,
    async handle(method, headers, rawBody) {
      if (method !== 'POST') return { status: 405, body: { error: 'method_not_allowed' } };
      if (rawBody.length > maxBodyBytes) return { status: 413, body: { error: 'payload_too_large' } };
      if (options.hooksToken !== undefined && !bearerMatches(headers.authorization, options.hooksToken)) {
        return { status: 401, body: { error: 'invalid_authorization' } };
      }
      const failure = checkSignature(options, secrets, headers, rawBody);
      if (failure) return { status: 401, body: { error: failure } };
      let event: WebhookEvent;
      try {
        event = JSON.parse(rawBody.toString('utf8')) as WebhookEvent;
      } catch {
        return { status: 400, body: { error: 'invalid_json' } };
      }
      if (!event || typeof event !== 'object' || typeof event.event !== 'string') {
        return { status: 400, body: { error: 'invalid_event' } };
      }
      const headerId = headers['x-service-event-id'];
      // Redeliveries carry identical bytes, so without an id the body's hash identifies the event.
      const eventId =
        (typeof headerId === 'string' && headerId) ||
        (typeof event.id === 'string' && event.id) ||
        `sha256:${createHash('sha256').update(rawBody).digest('hex')}`;
      if (dedupe && !(await dedupe.markIfNew(eventId))) {
        return { status: 200, body: { received: true, duplicate: true } };
      }
      const context: WebhookContext = { eventId, headers, rawBody };
      return {
        status: 200,
        body: { received: true },
        dispatch: () => {
          setImmediate(() => {
            Promise.resolve()
              .then(() => options.onEvent(event, context))
              .catch(async (error: unknown) => {
                // The service saw a 2xx and will not redeliver by itself; forgetting the id lets a
                // manual redelivery (dashboard) be processed again.
                await Promise.resolve(dedupe?.forget(eventId)).catch(() => {});
                onError(error, event);
              });
          });
        },
      };
    },
  };
}

/**
 * The Standard Webhooks headers are checked when present (signature and timestamp tolerance) and
 * required unless `allowUnsignedTimestamp`; X-Service-Signature is checked whenever present, so a
 * delivery with a tampered body fails either way.
 */
function checkSignature(
  options: WebhookReceiverOptions,
  secrets: readonly string[],
  headers: Record<string, string | string[] | undefined>,
  rawBody: Buffer,
): StandardVerifyFailure | null {
  const hasStandard = headers['webhook-signature'] !== undefined;
  if (hasStandard) {
    const failure = verifyStandardWebhook(rawBody, headers, secrets, {
      ...(options.toleranceSeconds !== undefined ? { toleranceSeconds: options.toleranceSeconds } : {}),
      ...(options.now ? { now: options.now } : {}),
    });
    if (failure) return failure;
  } else if (!options.allowUnsignedTimestamp) {
    return 'missing_headers';
  }
  if (headers['x-service-signature'] !== undefined || !hasStandard) {
    if (!verifySignature(rawBody, headers['x-service-signature'], secrets)) return 'invalid_signature';
  }
  return null;
}

function bearerMatches(header: string | string[] | undefined, token: string): boolean {
  if (typeof header !== 'string' || !header.startsWith('Bearer ')) return false;
  const given = Buffer.from(header.slice(7).trim());
  const expected = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
