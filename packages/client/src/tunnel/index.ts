import { WebSocket } from 'ws';
import { createWebhookReceiver, type WebhookReceiverOptions } from '../webhooks/receiver.ts';
import {
  CLOSE_AUTH_REJECTED,
  CLOSE_REPLACED,
  connectUrl,
  decodeFrame,
  encodeError,
  encodeResponse,
  FrameError,
  type IncomingFrame,
  MAX_BODY_BYTES,
  MAX_FRAME_BYTES,
  type RequestFrame,
  SUBPROTOCOL_V2,
} from './protocol.ts';

// The bot's managed tunnel, opened from the bot's own process (`@botpay/client/tunnel`). It
// connects out to the service over a WebSocket (docs/tunnels.md), receives the requests addressed
// to the bot's tunnel hostname and hands each to a handler in this process: no local HTTP server,
// no second process (the standalone `botpay tunnel` forwards to a local port instead, for bots
// written in other languages). Needs the `ws` package (an optional peer dependency).

/** The environment variable that holds the tunnel token, as in the registration's setup command. */
export const TUNNEL_TOKEN_ENV = 'BOTPAY_TUNNEL_TOKEN';
/** Handler calls running at once; more requests are answered with an error at once (relay: 502). */
export const DEFAULT_MAX_IN_FLIGHT = 256;
/** Bytes of answers waiting to be written to the service before reading new requests pauses. */
export const DEFAULT_MAX_QUEUED_BYTES = 8 * MAX_BODY_BYTES;

export interface TunnelRequest {
  method: string;
  /** Path and query string, as sent to the tunnel hostname. */
  path: string;
  /** Header fields by lower-case name; a repeated field is an array. */
  headers: Record<string, string | string[]>;
  /** The raw body bytes. */
  body: Buffer;
  /** Aborted when the service gives up on the request (its timeout) or the connection drops. */
  readonly signal: AbortSignal;
}

export interface TunnelResponse {
  status: number;
  headers?: Record<string, string | number | readonly string[]>;
  body?: string | Uint8Array;
}

export type TunnelHandler = (request: TunnelRequest) => TunnelResponse | Promise<TunnelResponse>;

export interface TunnelOptions {
  /** The service's base URL (BASE_URL), e.g. https://pay.example.com (http → ws, https → wss). */
  server: string;
  /** The tunnel token (`svc_tun_…`) from registration. Default: BOTPAY_TUNNEL_TOKEN. */
  token?: string;
  /** Called for every request that reaches the tunnel. Give this or `webhooks`. */
  handler?: TunnelHandler;
  /**
   * Receive webhooks: every request is verified, deduplicated and answered like
   * createNodeWebhookHandler does, and `onEvent` runs after the answer went out.
   */
  webhooks?: WebhookReceiverOptions;
  /** Handler calls running at once (default 256); a request above it is refused at once. */
  maxInFlight?: number;
  /** Bytes of answers that may wait for the service before reading pauses (default 8 MiB). */
  maxQueuedBytes?: number;
  /** Ping interval; a service that misses one pong is considered gone. Default 25 s. */
  heartbeatMs?: number;
  /** Reconnect backoff: first delay and cap (full jitter between half and all of it). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Connection changes and refused requests, one line each. Default: console.error. */
  log?: (line: string) => void;
}

/** Why a tunnel ended: closed by you, the token rejected, or replaced by another client. */
export interface TunnelEnd {
  reason: 'closed' | 'token_rejected' | 'replaced' | 'unsupported_service';
  message: string;
}

/** A handler call in flight: its request id on its connection, aborted on cancel. */
class Call {
  controller: AbortController | undefined;
  done = false;
  constructor(
    readonly ws: WebSocket,
    readonly id: number,
  ) {}
  get signal(): AbortSignal {
    this.controller ??= new AbortController();
    return this.controller.signal;
  }
  abort(): void {
    this.done = true;
    this.controller?.abort();
  }
}

class AuthRejected extends Error {}

export class BotPayTunnel {
  /** Times a connection was established (the service's hello received). */
  connections = 0;
  /** The bot's tunnel hostname and public address, while connected. */
  hostname: string | undefined;
  publicUrl: string | undefined;
  /** Settles when the tunnel ends for good (close(), a rejected token, a replacement). */
  readonly ended: Promise<TunnelEnd>;
  private ws: WebSocket | undefined;
  private stopped = false;
  private attempt = 0;
  private running = 0;
  private readonly calls = new Map<number, Call>();
  private readonly handler: TunnelHandler;
  private readonly wsUrl: string;
  private readonly token: string;
  private readonly maxInFlight: number;
  private readonly maxQueuedBytes: number;
  private readonly log: (line: string) => void;
  private connectedWaiters: Array<() => void> = [];
  private finish!: (end: TunnelEnd) => void;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly options: TunnelOptions) {
    const handler = options.handler ?? (options.webhooks ? webhookHandler(options.webhooks) : undefined);
    if (!handler || (options.handler && options.webhooks)) {
      throw new TypeError('openTunnel needs either `handler` or `webhooks`');
    }
    const token = options.token ?? process.env[TUNNEL_TOKEN_ENV]?.trim();
    if (!token) {
      throw new TypeError(`the tunnel token is missing: pass \`token\` or set ${TUNNEL_TOKEN_ENV}`);
    }
    this.handler = handler;
    this.token = token;
    this.wsUrl = connectUrl(options.server);
    this.maxInFlight = options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT;
    this.maxQueuedBytes = options.maxQueuedBytes ?? DEFAULT_MAX_QUEUED_BYTES;
    this.log = options.log ?? ((line) => console.error(line));
    this.ended = new Promise((resolve) => {
      this.finish = resolve;
    });
    this.connect();
  }

  get connected(): boolean {
    return this.ws?.readyState === WebSocket.OPEN && this.hostname !== undefined;
  }

  /** Handler calls running now. */
  get inFlight(): number {
    return this.running;
  }

  /** Resolves once the tunnel is (re)connected; rejects if it ends first. */
  waitConnected(): Promise<void> {
    if (this.connected) return Promise.resolve();
    if (this.stopped) return Promise.reject(new Error('the tunnel has ended'));
    return new Promise((resolve, reject) => {
      this.connectedWaiters.push(resolve);
      void this.ended.then((end) => reject(new Error(`the tunnel has ended: ${end.message}`)));
    });
  }

  /** Closes the tunnel (requests in flight are abandoned; the service answers them 502). */
  async close(): Promise<void> {
    this.end({ reason: 'closed', message: 'tunnel closed' });
    await this.ended;
  }

  private end(end: TunnelEnd): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.abortAll();
    const ws = this.ws;
    if (ws && ws.readyState !== WebSocket.CLOSED) {
      ws.close(1000, 'client stopping');
      setTimeout(() => ws.terminate(), 1_000).unref?.();
    }
    this.finish(end);
  }

  private abortAll(): void {
    for (const call of this.calls.values()) call.abort();
    this.calls.clear();
  }

  private connect(): void {
    if (this.stopped) return;
    const ws = new WebSocket(this.wsUrl, [SUBPROTOCOL_V2], {
      headers: { authorization: `Bearer ${this.token}` },
      maxPayload: MAX_FRAME_BYTES,
      perMessageDeflate: false,
      handshakeTimeout: 15_000,
    });
    ws.binaryType = 'nodebuffer';
    this.ws = ws;
    let alive = true;
    let heartbeat: ReturnType<typeof setInterval> | undefined;
    let failure: Error | undefined;
    ws.on('unexpected-response', (_req, res) => {
      failure =
        res.statusCode === 401 || res.statusCode === 403
          ? new AuthRejected(`HTTP ${res.statusCode}`)
          : new Error(`the service answered HTTP ${res.statusCode} to the tunnel upgrade`);
      res.resume();
      ws.terminate();
    });
    ws.on('error', (error) => {
      failure ??= error;
    });
    ws.on('open', () => {
      heartbeat = setInterval(() => {
        if (!alive) {
          this.log('botpay tunnel: no heartbeat answer from the service; reconnecting');
          ws.terminate();
          return;
        }
        alive = false;
        ws.ping();
      }, this.options.heartbeatMs ?? 25_000);
      heartbeat.unref?.();
    });
    ws.on('pong', () => {
      alive = true;
    });
    ws.on('ping', () => {
      alive = true;
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      alive = true;
      if (isBinary && this.ws === ws) this.onFrame(ws, data);
    });
    ws.on('close', (code, reasonBuffer) => {
      if (heartbeat) clearInterval(heartbeat);
      if (this.ws !== ws) return;
      const wasConnected = this.hostname !== undefined;
      this.hostname = undefined;
      this.abortAll();
      if (this.stopped) return;
      const reason = reasonBuffer.toString();
      if (failure instanceof AuthRejected || code === CLOSE_AUTH_REJECTED) {
        const message = `the service rejected the tunnel token (${failure instanceof AuthRejected ? failure.message : reason || 'token revoked'}); if the owner rotated it, use the new one`;
        this.log(`botpay tunnel: ${message}`);
        this.end({ reason: 'token_rejected', message });
        return;
      }
      if (code === CLOSE_REPLACED) {
        const message = 'another tunnel client connected with the same token and replaced this one';
        this.log(`botpay tunnel: ${message}`);
        this.end({ reason: 'replaced', message });
        return;
      }
      if (wasConnected) this.attempt = 0;
      const base = Math.min(
        this.options.backoffMaxMs ?? 30_000,
        (this.options.backoffInitialMs ?? 500) * 2 ** Math.min(this.attempt, 20),
      );
      const delay = Math.round(base / 2 + Math.random() * (base / 2));
      this.attempt++;
      const why = failure ? failure.message : `connection closed (${code}${reason ? ` ${reason}` : ''})`;
      this.log(`botpay tunnel: ${why}; reconnecting in ${(delay / 1000).toFixed(1)} s`);
      this.retryTimer = setTimeout(() => this.connect(), delay);
    });
  }

  private onFrame(ws: WebSocket, data: Buffer): void {
    if (this.hostname === undefined && data.length > 0 && data[0] === 0) {
      const message =
        'the service speaks only the first tunnel protocol; update the service, or run `botpay tunnel` instead';
      this.log(`botpay tunnel: ${message}`);
      this.end({ reason: 'unsupported_service', message });
      return;
    }
    let frame: IncomingFrame;
    try {
      frame = decodeFrame(data);
    } catch (error) {
      if (error instanceof FrameError) return; // refused: nothing reaches the handler
      throw error;
    }
    if (frame.type === 'request') this.onRequest(ws, frame);
    else if (frame.type === 'cancel') {
      const call = this.calls.get(frame.id);
      if (call && call.ws === ws) {
        this.calls.delete(frame.id);
        call.abort();
      }
    } else {
      this.hostname = frame.hostname;
      this.publicUrl = frame.public_url;
      this.connections++;
      this.attempt = 0;
      this.log(`botpay tunnel: connected; ${frame.public_url} → this process`);
      const waiters = this.connectedWaiters;
      this.connectedWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }

  private onRequest(ws: WebSocket, frame: RequestFrame): void {
    if (this.calls.has(frame.id)) return; // a duplicate id: the first one is answered
    // A call holds its slot until the handler settles, also after a cancel: the bound is on the
    // handler calls running in this process.
    if (this.running >= this.maxInFlight) {
      this.send(ws, encodeError(frame.id, `the bot already handles ${this.maxInFlight} tunnel requests`));
      return;
    }
    const call = new Call(ws, frame.id);
    this.calls.set(frame.id, call);
    this.running++;
    let result: TunnelResponse | Promise<TunnelResponse>;
    try {
      result = this.handler(new IncomingRequest(frame, call));
    } catch (error) {
      this.settled(call, error, true);
      return;
    }
    if (result instanceof Promise || typeof (result as { then?: unknown })?.then === 'function') {
      Promise.resolve(result).then(
        (response) => this.settled(call, response, false),
        (error: unknown) => this.settled(call, error, true),
      );
    } else this.settled(call, result, false);
  }

  /** A handler call ended: its answer (or an error) goes back unless it was cancelled. */
  private settled(call: Call, outcome: unknown, threw: boolean): void {
    this.running--;
    if (this.calls.get(call.id) === call) this.calls.delete(call.id);
    if (call.done) return;
    call.done = true;
    if (threw) {
      // The message stays here: the relay's answer goes to whoever called the public hostname.
      this.log(
        `botpay tunnel: the handler failed: ${outcome instanceof Error ? outcome.message : String(outcome)}`,
      );
      this.send(call.ws, encodeError(call.id, 'the bot’s tunnel handler failed'));
      return;
    }
    let frame: Buffer;
    try {
      frame = responseFrame(call.id, outcome as TunnelResponse);
    } catch (error) {
      this.log(`botpay tunnel: ${error instanceof Error ? error.message : String(error)}`);
      frame = encodeError(call.id, 'the bot’s tunnel handler gave an invalid response');
    }
    this.send(call.ws, frame);
  }

  /**
   * Sends a frame to the service. Backpressure: when the service does not read what it is sent,
   * reading new requests stops until what waits has left.
   */
  private send(ws: WebSocket, frame: Buffer): void {
    if (ws.readyState !== WebSocket.OPEN) return;
    corkFor(ws);
    ws.send(frame, this.afterSend);
    if (!ws.isPaused && ws.bufferedAmount > this.maxQueuedBytes) ws.pause();
  }

  private readonly afterSend = (): void => {
    const ws = this.ws;
    if (ws?.isPaused && ws.readyState === WebSocket.OPEN && ws.bufferedAmount < this.maxQueuedBytes / 2) {
      ws.resume();
    }
  };
}

/** A request as the handler sees it (headers built once, the abort signal only when read). */
class IncomingRequest implements TunnelRequest {
  readonly method: string;
  readonly path: string;
  readonly body: Buffer;
  readonly headers: Record<string, string | string[]> = {};
  constructor(
    frame: RequestFrame,
    private readonly call: Call,
  ) {
    this.method = frame.method;
    this.path = frame.path;
    this.body = frame.body;
    const fields = frame.fields;
    for (let i = 0; i + 1 < fields.length; i += 2) {
      const name = (fields[i] as string).toLowerCase();
      const value = fields[i + 1] as string;
      const there = this.headers[name];
      if (there === undefined) this.headers[name] = value;
      else if (Array.isArray(there)) there.push(value);
      else this.headers[name] = [there, value];
    }
  }
  get signal(): AbortSignal {
    return this.call.signal;
  }
}

const encoder = new TextEncoder();

function responseFrame(id: number, response: TunnelResponse): Buffer {
  if (!response || !Number.isInteger(response.status) || response.status < 100 || response.status > 999) {
    throw new TypeError('a tunnel handler must return { status, headers?, body? } with an HTTP status');
  }
  const body = typeof response.body === 'string' ? encoder.encode(response.body) : response.body;
  if (body && body.byteLength > MAX_BODY_BYTES) {
    throw new RangeError(`the response body exceeds ${MAX_BODY_BYTES} bytes`);
  }
  const fields: string[] = [];
  for (const [name, value] of Object.entries(response.headers ?? {})) {
    if (Array.isArray(value)) for (const v of value) fields.push(name, String(v));
    else fields.push(name, String(value));
  }
  return encodeResponse(id, response.status, fields, body);
}

const corked = new WeakSet<object>();

/**
 * Frames sent in the same event-loop turn leave in one write: the socket is corked until
 * setImmediate (as the service's relay and `botpay tunnel` do).
 */
function corkFor(ws: WebSocket): void {
  const socket = (ws as unknown as { _socket?: { cork?: () => void; uncork: () => void } })._socket;
  if (!socket || typeof socket.cork !== 'function' || corked.has(socket)) return;
  corked.add(socket);
  socket.cork();
  setImmediate(() => {
    corked.delete(socket);
    socket.uncork();
  });
}

/**
 * A tunnel handler that receives the bot's webhooks: verifies the signatures, parses, deduplicates
 * and answers as createNodeWebhookHandler does (`@botpay/client/webhooks`), then runs `onEvent`.
 */
export function webhookHandler(options: WebhookReceiverOptions): TunnelHandler {
  const receiver = createWebhookReceiver(options);
  return async (request) => {
    const answer = await receiver.handle(request.method, request.headers, request.body);
    // The receiver runs onEvent on a later turn (setImmediate): after this answer has been sent.
    answer.dispatch?.();
    return {
      status: answer.status,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(answer.body),
    };
  };
}

/**
 * Opens the bot's managed tunnel from this process: requests to the bot's tunnel hostname (its
 * webhooks, and more if the owner allows it) reach `handler`, or the webhook receiver built from
 * `webhooks`. Reconnects with backoff until `close()`, a rejected token or a replacement
 * (`ended`).
 */
export function openTunnel(options: TunnelOptions): BotPayTunnel {
  return new BotPayTunnel(options);
}

export { connectUrl, MAX_BODY_BYTES } from './protocol.ts';
