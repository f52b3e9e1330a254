import { createHmac } from 'node:crypto';
import type { Agent, Dispatcher } from 'undici';
import type { LocalTunnelRelay } from '../platform/context.ts';
import {
  assertLiteralAllowed,
  ForbiddenTargetError,
  guardedLookup,
  type Resolver,
  systemResolver,
} from './ssrf.ts';
import { memoize } from '../platform/memo.ts';

// One HTTP attempt of a delivery: exact bytes, signed headers, no redirects, a hard deadline and
// at most EXCERPT_BYTES of the answer read. Deliveries for a managed-tunnel bot go through the
// relay (same bytes, same headers): to the connection this process holds or, when instances share
// tunnels, to the instance that holds it. They never go out to the tunnel's public URL, so a tunnel
// hostname (bot-<id>.TUNNEL_DOMAIN) is never resolved through DNS: a tunnel with no client connected
// is reported as such (`tunnelNotConnected`), and the worker decides what that means
// (src/webhooks/tunnelWait.ts).

export const EXCERPT_BYTES = 1024;
export const USER_AGENT = 'botpay-webhooks/1';

/** sha256=<hex HMAC-SHA256 of the raw body keyed with the webhook secret>. */
export function signBody(secret: string, body: string | Buffer): string {
  return `sha256=${createHmac('sha256', keysOf(secret).raw).update(body).digest('hex')}`;
}

interface SigningKeys {
  /** The secret's UTF-8 bytes (X-Service-Signature's key). */
  raw: Buffer;
  /** The base64-decoded part of `whsec_…` (the Standard Webhooks key). */
  standard: Buffer;
}

// The keys of each secret, by the secret: a bot's secret is converted once, not at every attempt
// (both signatures of an attempt are keyed with bytes derived from it).
const keysOf = memoize<SigningKeys>(10_000, (secret) => ({
  raw: Buffer.from(secret, 'utf8'),
  standard: Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64'),
}));

/**
 * The Standard Webhooks signature (standardwebhooks.com): `v1,` + base64 HMAC-SHA256 of
 * `${msgId}.${timestampSeconds}.${body}`, keyed with the base64-decoded part of `whsec_…`.
 * `webhook-signature` carries one of these per secret that currently signs, separated by spaces.
 */
export function standardSignature(
  secret: string,
  msgId: string,
  timestampSeconds: number,
  body: string | Buffer,
): string {
  const mac = createHmac('sha256', keysOf(secret).standard)
    .update(`${msgId}.${timestampSeconds}.`)
    .update(body);
  return `v1,${mac.digest('base64')}`;
}

/**
 * Every signature header of one attempt: SPEC's X-Service-Signature with the current secret, and
 * the Standard Webhooks trio (`webhook-id` is the event id, stable across retries, so receivers can
 * deduplicate; `webhook-timestamp` is the attempt's time, for replay protection) signed with the
 * current secret and, during a rotation's overlap window, the previous one. Written into `headers`
 * (a new object when none is given), which is returned.
 */
export function signatureHeaders(
  secrets: { current: string; previous: string | null },
  eventId: string,
  timestampSeconds: number,
  body: Buffer,
  headers: Record<string, string> = {},
): Record<string, string> {
  let signatures = standardSignature(secrets.current, eventId, timestampSeconds, body);
  if (secrets.previous)
    signatures += ` ${standardSignature(secrets.previous, eventId, timestampSeconds, body)}`;
  headers['x-service-signature'] = signBody(secrets.current, body);
  headers['webhook-id'] = eventId;
  headers['webhook-timestamp'] = String(timestampSeconds);
  headers['webhook-signature'] = signatures;
  return headers;
}

export type DeliveryTarget =
  | { kind: 'callback'; url: string }
  | { kind: 'tunnel'; hostname: string; path: string };

/** The error text of an attempt that found no tunnel client connected for the bot. */
export const TUNNEL_NOT_CONNECTED = "the bot's tunnel client is not connected";

export interface AttemptResult {
  ok: boolean;
  status: number | null;
  excerpt: string | null;
  error: string | null;
  durationMs: number;
  /** Where it went: callback URL without query, or relay:<host>. */
  via: string;
  /** Set when no tunnel client was connected for the bot: nothing was sent. */
  tunnelNotConnected?: true;
}

export interface SenderOptions {
  timeoutMs: number;
  allowPrivateTargets: boolean;
  resolver?: Resolver;
  tunnelRelay?: LocalTunnelRelay;
  now?: () => number;
}

export interface WebhookSender {
  send(target: DeliveryTarget, body: Buffer, headers: Record<string, string>): Promise<AttemptResult>;
  close(): Promise<void>;
}

function cleanExcerpt(bytes: Buffer): string | null {
  if (bytes.length === 0) return null;
  // PostgreSQL text cannot hold NUL; a cut multi-byte character becomes U+FFFD.
  const text = bytes.toString('utf8', 0, Math.min(bytes.length, EXCERPT_BYTES));
  return text.includes('\u0000') ? text.replaceAll('\u0000', '\uFFFD') : text;
}

function withoutQuery(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return 'invalid URL';
  }
}

export function describeError(error: unknown, timeoutMs: number): string {
  let e: unknown = error;
  for (let depth = 0; depth < 4 && e; depth++) {
    if (e instanceof ForbiddenTargetError) return e.message;
    const name = (e as { name?: string }).name;
    const code = (e as { code?: string }).code;
    if (
      name === 'TimeoutError' ||
      name === 'AbortError' ||
      code === 'UND_ERR_HEADERS_TIMEOUT' ||
      code === 'UND_ERR_BODY_TIMEOUT'
    )
      return `timeout after ${timeoutMs} ms`;
    if (code === 'ESSRF') return (e as Error).message;
    if (code === 'ECONNREFUSED') return 'connection refused';
    if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `DNS lookup failed (${code})`;
    if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return 'connection reset';
    const cause = (e as { cause?: unknown }).cause;
    if (!cause) break;
    e = cause;
  }
  const message = error instanceof Error ? error.message : String(error);
  return message.slice(0, 300) || 'request failed';
}

interface ParsedTarget {
  origin: string;
  path: string;
  hostname: string;
  /** The URL without its query (what the delivery log shows). */
  via: string;
}

// Parsed callback URLs by their text: a bot's URL is parsed once, not on every attempt.
const parseTarget = memoize<ParsedTarget>(10_000, (url) => {
  const parsed = new URL(url);
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error('unsupported URL scheme');
  return {
    origin: parsed.origin,
    path: `${parsed.pathname}${parsed.search}`,
    hostname: parsed.hostname,
    via: `${parsed.origin}${parsed.pathname}`,
  };
});

class DeadlineError extends Error {
  override name = 'TimeoutError';
}

/**
 * One POST through undici's dispatcher API: no Readable streams or AbortSignal per attempt, which
 * cost the worker more CPU than the request itself, and one promise per attempt (the handler
 * settles it with the attempt's result). At most EXCERPT_BYTES of the answer are kept; an answer
 * that goes on beyond them is cut (its connection is then closed). A hard deadline covers the
 * whole exchange, a slow drip of the body included; redirects are not followed (the dispatcher has
 * no redirect interceptor). Never rejects: a failure is an attempt result.
 */
function dispatchPost(
  dispatcher: Dispatcher,
  target: ParsedTarget,
  body: Buffer,
  headers: Record<string, string>,
  timeoutMs: number,
  now: () => number,
): Promise<AttemptResult> {
  return new Promise((resolve) => {
    const call = new PostCall(timeoutMs, target.via, now, resolve);
    try {
      dispatcher.dispatch(
        {
          origin: target.origin,
          path: target.path,
          method: 'POST',
          headers,
          body,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
        },
        call,
      );
    } catch (error) {
      call.onError(error as Error);
    }
  });
}

/**
 * The handler of one POST. It implements the interface undici's own requests use (onConnect,
 * onHeaders, onData, onComplete, onError) rather than the controller one (onRequestStart,
 * onResponseStart, …), for which undici wraps each request's handler in an adapter with a
 * controller object and parses the answer's header fields and trailers into objects that a
 * delivery never reads. It settles with the attempt's result.
 */
class PostCall implements Dispatcher.DispatchHandler {
  private abortRequest: ((error?: Error) => void) | undefined;
  private settled = false;
  private status = 0;
  private chunks: Buffer[] = [];
  private size = 0;
  private readonly started: number;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly timeoutMs: number,
    private readonly via: string,
    private readonly now: () => number,
    private readonly resolve: (result: AttemptResult) => void,
  ) {
    this.started = now();
    this.timer = setTimeout(() => this.deadline(), timeoutMs);
  }

  private deadline(): void {
    const error = new DeadlineError(`timeout after ${this.timeoutMs} ms`);
    this.settle(error);
    this.abortRequest?.(error);
  }

  private settle(error?: Error): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    const durationMs = Math.round(this.now() - this.started);
    if (error) {
      this.resolve({
        ok: false,
        status: null,
        excerpt: null,
        error: describeError(error, this.timeoutMs),
        durationMs,
        via: this.via,
      });
      return;
    }
    const status = this.status;
    const ok = status >= 200 && status < 300;
    const chunks = this.chunks;
    this.resolve({
      ok,
      status,
      excerpt: cleanExcerpt(
        chunks.length === 1
          ? (chunks[0] as Buffer)
          : Buffer.concat(chunks, Math.min(this.size, EXCERPT_BYTES)),
      ),
      error: ok ? null : `HTTP ${status}`,
      durationMs,
      via: this.via,
    });
  }

  onConnect(abort: (error?: Error) => void): void {
    this.abortRequest = abort;
    if (this.settled) abort(new DeadlineError(`timeout after ${this.timeoutMs} ms`));
  }

  onHeaders(statusCode: number): boolean {
    this.status = statusCode;
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.size < EXCERPT_BYTES) this.chunks.push(chunk);
    this.size += chunk.length;
    if (this.size >= EXCERPT_BYTES && !this.settled) {
      // Enough read: answer now and stop the transfer.
      this.settle();
      this.abortRequest?.(new Error('response excerpt complete'));
    }
    return true;
  }

  onComplete(): void {
    this.settle();
  }

  onError(error: Error): void {
    this.settle(error);
  }
}

function notConnected(hostname: string, durationMs: number): AttemptResult {
  return {
    ok: false,
    status: null,
    excerpt: null,
    error: TUNNEL_NOT_CONNECTED,
    durationMs,
    via: `relay:${hostname}`,
    tunnelNotConnected: true,
  };
}

export function createWebhookSender(options: SenderOptions): WebhookSender {
  const now = options.now ?? (() => performance.now());
  // undici (~100 ms and ~20 MB to load) is loaded with the first delivery, not at start.
  let agents: Promise<Agent> | undefined;
  /** The agent once loaded: later deliveries reach it without waiting on a promise. */
  let loaded: Agent | undefined;
  const openAgent = () => {
    agents ??= import('undici').then(({ Agent }) => {
      loaded = new Agent({
        keepAliveTimeout: 10_000,
        connect: {
          timeout: options.timeoutMs,
          ...(options.allowPrivateTargets
            ? {}
            : { lookup: guardedLookup(options.resolver ?? systemResolver) }),
        },
      });
      return loaded;
    });
    return agents;
  };

  /** A callback delivery; its result's promise is the attempt's only one (dispatchPost). */
  function post(
    agent: Agent,
    url: string,
    body: Buffer,
    headers: Record<string, string>,
  ): Promise<AttemptResult> {
    let target: ParsedTarget | undefined;
    try {
      target = parseTarget(url);
      // Sockets skip `lookup` for literal IPs, so those are judged here.
      if (!options.allowPrivateTargets) assertLiteralAllowed(target.hostname);
    } catch (error) {
      return Promise.resolve({
        ok: false,
        status: null,
        excerpt: null,
        error: describeError(error, options.timeoutMs),
        durationMs: 0,
        via: target ? target.via : withoutQuery(url),
      });
    }
    return dispatchPost(agent, target, body, headers, options.timeoutMs, now);
  }

  async function relay(
    relay: LocalTunnelRelay,
    target: Extract<DeliveryTarget, { kind: 'tunnel' }>,
    body: Buffer,
    headers: Record<string, string>,
  ): Promise<AttemptResult> {
    const started = now();
    const via = `relay:${target.hostname}`;
    try {
      const response = await relay.forward({
        hostname: target.hostname,
        method: 'POST',
        path: target.path,
        headers,
        body,
        timeoutMs: options.timeoutMs,
      });
      const ok = response.status >= 200 && response.status < 300;
      return {
        ok,
        status: response.status,
        excerpt: cleanExcerpt(response.body.subarray(0, EXCERPT_BYTES)),
        error: ok ? null : `HTTP ${response.status}`,
        durationMs: Math.round(now() - started),
        via,
      };
    } catch (error) {
      if (error instanceof Error && (error as { code?: string }).code === 'tunnel_not_connected') {
        return notConnected(target.hostname, Math.round(now() - started));
      }
      return {
        ok: false,
        status: null,
        excerpt: null,
        error: describeError(error, options.timeoutMs),
        durationMs: Math.round(now() - started),
        via,
      };
    }
  }

  return {
    send(target, body, headers) {
      if (target.kind === 'callback') {
        if (loaded) return post(loaded, target.url, body, headers);
        return openAgent().then((agent) => post(agent, target.url, body, headers));
      }
      const tunnel = options.tunnelRelay;
      if (tunnel && (tunnel.canDeliver?.(target.hostname) ?? tunnel.hasConnection(target.hostname))) {
        return relay(tunnel, target, body, headers);
      }
      // No relay here that can reach the tunnel (none is connected to this process, and instances do
      // not share tunnels): nothing to send to. Never the public URL, which would only resolve the
      // service's own tunnel hostname through DNS and come back here, or fail.
      return Promise.resolve(notConnected(target.hostname, 0));
    },
    async close() {
      if (!agents) return;
      await (await agents).close();
    },
  };
}
