import { Pool } from 'undici';
import WebSocket from 'ws';
import { BoundedCall } from './boundedCall.ts';
import { InFlight } from './inflight.ts';
import {
  CLOSE_AUTH_REJECTED,
  CLOSE_REPLACED,
  type Codec,
  codecForHello,
  decodeFlat,
  encodeRawResponse,
  type FlatFrame,
  keepForwardable,
  MAX_BODY_BYTES,
  MAX_FRAME_BYTES,
  type RawHeaders,
  SUBPROTOCOL_V2,
  sendFrame,
  TUNNEL_CONNECT_PATH,
} from './protocol.ts';

// The managed-tunnel client (`botpay tunnel`): connects out to the service over a WebSocket,
// receives the requests addressed to the bot's hostname and forwards each to
// http://127.0.0.1:<port><path>, sending the response back over the same connection.

/** Exit codes of `botpay tunnel` (documented in docs/tunnels.md). */
export const EXIT_OK = 0;
export const EXIT_USAGE = 2;
export const EXIT_TOKEN_REJECTED = 3;
export const EXIT_REPLACED = 4;

/** At most this many requests are forwarded at once; more are answered with an error frame at once. */
export const CLIENT_MAX_IN_FLIGHT = 256;
/**
 * Above this many bytes of answers not yet written to the relay, the client stops reading new
 * requests until they have left (the relay's own bound then answers 503): 8 MiB.
 */
export const CLIENT_MAX_QUEUED_BYTES = 8 * MAX_BODY_BYTES;

export interface TunnelClientOptions {
  /** The service's BASE_URL (http → ws, https → wss). */
  server: string;
  token: string;
  /** Local port of the bot's webhook receiver. */
  port: number;
  /** The webhook path (shown in logs); requests keep the path they were sent to. */
  path?: string;
  /** Where log lines go (default: stdout / stderr). */
  log?: (line: string) => void;
  /** Client-side ping interval; a server that misses one pong is considered gone. Default 25 s. */
  heartbeatMs?: number;
  /** Reconnect backoff: first delay and cap (full jitter between half and all of the delay). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Local host to forward to (default 127.0.0.1). */
  localHost?: string;
  /** Requests forwarded at once (default CLIENT_MAX_IN_FLIGHT). */
  maxInFlight?: number;
  /** Bytes of answers that may wait for the relay before reading pauses (default CLIENT_MAX_QUEUED_BYTES). */
  maxQueuedBytes?: number;
}

export interface TunnelExit {
  code: number;
  message: string;
}

class AuthRejected extends Error {}

export class TunnelClient {
  private ws: WebSocket | undefined;
  private stopped = false;
  private attempt = 0;
  private pool: Pool;
  private readonly inflight: InFlight<LocalCall>;
  /** The frame format of the current connection, set by the relay's hello. */
  private codec: Codec | undefined;
  private readonly log: (line: string) => void;
  private readonly maxQueuedBytes: number;
  private readonly wsUrl: string;
  private connectedWaiters: Array<() => void> = [];
  private finish!: (exit: TunnelExit) => void;
  private readonly done: Promise<TunnelExit>;
  private retryTimer: NodeJS.Timeout | undefined;
  private started = false;
  /** Times a connection was established (hello received). */
  connections = 0;
  hostname: string | undefined;
  publicUrl: string | undefined;

  constructor(private readonly options: TunnelClientOptions) {
    this.log = options.log ?? ((line) => console.log(line));
    this.maxQueuedBytes = options.maxQueuedBytes ?? CLIENT_MAX_QUEUED_BYTES;
    this.inflight = new InFlight(options.maxInFlight ?? CLIENT_MAX_IN_FLIGHT);
    this.wsUrl = connectUrl(options.server);
    const localHost = options.localHost ?? '127.0.0.1';
    this.pool = new Pool(`http://${localHost}:${options.port}`, {
      connections: 64,
      pipelining: 1,
      keepAliveTimeout: 10_000,
    });
    this.done = new Promise((resolve) => {
      this.finish = resolve;
    });
  }

  get connected(): boolean {
    return this.ws?.readyState === WebSocket.OPEN && this.hostname !== undefined;
  }

  /** Connects and keeps the tunnel up until stop(), a rejected token or a replacement. */
  run(): Promise<TunnelExit> {
    if (!this.started) {
      this.started = true;
      this.connect();
    }
    return this.done;
  }

  /** Resolves once the tunnel is (re)connected. */
  waitConnected(): Promise<void> {
    if (this.connected) return Promise.resolve();
    return new Promise((resolve) => this.connectedWaiters.push(resolve));
  }

  async stop(): Promise<void> {
    this.end({ code: EXIT_OK, message: 'tunnel client stopped' });
    await this.done;
  }

  private end(exit: TunnelExit): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    for (const call of this.inflight.values()) call.abort();
    this.inflight.clear();
    const ws = this.ws;
    if (ws && ws.readyState !== WebSocket.CLOSED) {
      ws.close(1000, 'client stopping');
      setTimeout(() => ws.terminate(), 1_000).unref();
    }
    void this.pool.close().catch(() => {});
    this.finish(exit);
  }

  private connect(): void {
    if (this.stopped) return;
    // Offers the binary protocol; a relay from before it answers without a subprotocol (or echoes
    // it without speaking it): the hello's first byte tells (codecForHello).
    this.codec = undefined;
    const ws = new WebSocket(this.wsUrl, [SUBPROTOCOL_V2], {
      headers: { authorization: `Bearer ${this.options.token}` },
      maxPayload: MAX_FRAME_BYTES,
      perMessageDeflate: false,
      handshakeTimeout: 15_000,
    });
    ws.binaryType = 'nodebuffer';
    this.ws = ws;
    let alive = true;
    let heartbeat: NodeJS.Timeout | undefined;
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
          this.log(`${stamp()} tunnel: no heartbeat answer from the service; reconnecting`);
          ws.terminate();
          return;
        }
        alive = false;
        ws.ping();
      }, this.options.heartbeatMs ?? 25_000);
      heartbeat.unref();
    });
    ws.on('pong', () => {
      alive = true;
    });
    ws.on('ping', () => {
      alive = true;
    });
    ws.on('message', (data: Buffer, isBinary) => {
      alive = true;
      if (isBinary && this.ws === ws) this.onFrame(ws, data);
    });
    ws.on('close', (code, reasonBuffer) => {
      if (heartbeat) clearInterval(heartbeat);
      for (const call of this.inflight.values()) call.abort();
      this.inflight.clear();
      const wasConnected = this.hostname !== undefined && this.ws === ws;
      if (this.ws === ws) this.hostname = undefined;
      if (this.stopped) return;
      const reason = reasonBuffer.toString();
      if (failure instanceof AuthRejected || code === CLOSE_AUTH_REJECTED) {
        const message = `The service rejected the tunnel token (${failure instanceof AuthRejected ? failure.message : `closed: ${reason || 'token revoked'}`}). Check the token (BOTPAY_TUNNEL_TOKEN, --token-file or --token); if the owner rotated it, use the new one.`;
        this.log(`${stamp()} tunnel: ${message}`);
        this.end({ code: EXIT_TOKEN_REJECTED, message });
        return;
      }
      if (code === CLOSE_REPLACED) {
        const message = 'Another tunnel client connected with the same token and replaced this one; exiting.';
        this.log(`${stamp()} tunnel: ${message}`);
        this.end({ code: EXIT_REPLACED, message });
        return;
      }
      const why = failure
        ? describeError(failure)
        : `connection closed (${code}${reason ? ` ${reason}` : ''})`;
      if (wasConnected) this.attempt = 0;
      const base = Math.min(
        this.options.backoffMaxMs ?? 30_000,
        (this.options.backoffInitialMs ?? 500) * 2 ** Math.min(this.attempt, 20),
      );
      const delay = Math.round(base / 2 + Math.random() * (base / 2));
      this.attempt++;
      this.log(`${stamp()} tunnel: ${why}; reconnecting in ${(delay / 1000).toFixed(1)} s`);
      this.retryTimer = setTimeout(() => this.connect(), delay);
    });
  }

  private onFrame(ws: WebSocket, data: Buffer): void {
    this.codec ??= codecForHello(data);
    const codec = this.codec;
    let frame: FlatFrame;
    try {
      frame = decodeFlat(codec, data);
    } catch {
      return; // refused: nothing reaches the local service
    }
    if (frame.type === 'request') {
      this.handleRequest(ws, codec, frame);
      return;
    }
    if (frame.type !== 'other') return;
    const header = frame.frame.header;
    switch (header.type) {
      case 'hello': {
        this.hostname = header.hostname;
        this.publicUrl = header.public_url;
        this.connections++;
        this.attempt = 0;
        const path = this.options.path ?? '';
        this.log(
          `${stamp()} tunnel: connected; ${header.public_url}${path} → http://${this.options.localHost ?? '127.0.0.1'}:${this.options.port}${path}`,
        );
        const waiters = this.connectedWaiters;
        this.connectedWaiters = [];
        for (const resolve of waiters) resolve();
        return;
      }
      case 'cancel':
        this.inflight.get(header.id)?.abort();
        return;
      default:
        return;
    }
  }

  private handleRequest(ws: WebSocket, codec: Codec, request: Extract<FlatFrame, { type: 'request' }>): void {
    if (this.inflight.has(request.id)) return; // a duplicate id: the first one is answered
    const maxInFlight = this.options.maxInFlight ?? CLIENT_MAX_IN_FLIGHT;
    if (this.inflight.size >= maxInFlight) {
      const message = `the tunnel client already has ${maxInFlight} requests in flight`;
      this.send(ws, codec.encode({ type: 'error', id: request.id, message }));
      this.log(`${stamp()} ${request.method} ${request.path} → error: ${message}`);
      return;
    }
    // A little longer than the relay waits, so that the relay's own timeout (504) answers first;
    // undici enforces it (no timer of our own per request), and the relay's cancel aborts sooner.
    const timeoutMs = Math.min(Math.max(request.timeoutMs || 10_000, 100), 120_000) + 1_000;
    const call = new LocalCall(this, ws, codec, request.id, request.method, request.path);
    this.inflight.set(call);
    this.pool.dispatch(
      {
        method: request.method as 'GET',
        path: request.path,
        headers: keepForwardable(request.fields),
        body: request.body.length > 0 ? request.body : null,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      },
      call,
    );
  }

  /** A local request ended: its answer (or error) goes back to the relay, one log line. */
  answered(
    call: LocalCall,
    response: { status: number; rawHeaders: RawHeaders; body: Buffer } | Error,
  ): void {
    if (this.inflight.get(call.id) === call) this.inflight.delete(call.id);
    let outcome: string;
    if (response instanceof Error) outcome = this.failed(call, response);
    else {
      try {
        // The relay filters what it passes on.
        this.send(
          call.ws,
          encodeRawResponse(call.codec, call.id, response.status, response.rawHeaders, response.body),
        );
        outcome = String(response.status);
      } catch (error) {
        outcome = this.failed(call, error as Error); // e.g. header fields over MAX_HEADER_BYTES
      }
    }
    this.log(
      `${stamp()} ${call.method} ${call.path} → ${outcome} ${Math.round(performance.now() - call.started)} ms`,
    );
  }

  /** Tells the relay a local request failed; the log line's outcome. */
  private failed(call: LocalCall, error: Error): string {
    const code = (error as { code?: string }).code;
    const message =
      code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT'
        ? 'the local service did not answer in time'
        : `the local service at 127.0.0.1:${this.options.port} failed: ${describeError(error)}`;
    this.send(call.ws, call.codec.encode({ type: 'error', id: call.id, message }));
    return `error: ${message}`;
  }

  /**
   * Sends a frame to the relay. Backpressure: when the relay does not read what it is sent, the
   * client stops reading new requests (ws.pause) until what waits has left; it never queues more
   * than about CLIENT_MAX_QUEUED_BYTES plus one frame.
   */
  private send(ws: WebSocket, frame: Buffer): void {
    if (ws.readyState !== WebSocket.OPEN) return;
    sendFrame(ws as WebSocket & { _socket?: unknown }, frame, this.afterSend);
    if (!ws.isPaused && ws.bufferedAmount > this.maxQueuedBytes) ws.pause();
  }

  /** After a frame has been written: reading resumes once less than half the bound waits. */
  private readonly afterSend = (): void => {
    const ws = this.ws;
    if (ws?.isPaused && ws.readyState === WebSocket.OPEN && ws.bufferedAmount < this.maxQueuedBytes / 2) {
      ws.resume();
    }
  };
}

/**
 * One request to the local receiver, as undici's dispatch handler (no stream objects, promises or
 * closures per request: a busy tunnel relays thousands a second). The response body is bounded
 * by MAX_BODY_BYTES; the response's header fields stay the bytes undici read (BoundedCall).
 */
class LocalCall extends BoundedCall {
  readonly started = performance.now();
  private aborted = false;
  private status = 0;
  private rawHeaders: RawHeaders = [];

  constructor(
    private readonly client: TunnelClient,
    readonly ws: WebSocket,
    readonly codec: Codec,
    readonly id: number,
    readonly method: string,
    readonly path: string,
  ) {
    super(MAX_BODY_BYTES);
  }

  /** Aborts the local request (the relay cancelled it, or the connection went away). */
  abort(): void {
    this.aborted = true;
    this.abortRequest?.(new Error('aborted'));
  }

  override onConnect(abort: (error?: Error) => void): void {
    super.onConnect(abort);
    if (this.aborted) abort(new Error('aborted'));
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    this.status = statusCode;
    this.rawHeaders = rawHeaders ?? [];
    return true;
  }

  protected overLimit(): Error {
    return new Error(`the local response body exceeds ${MAX_BODY_BYTES} bytes`);
  }

  protected finish(body: Buffer): void {
    this.client.answered(this, { status: this.status, rawHeaders: this.rawHeaders, body });
  }

  protected fail(error: Error): void {
    this.client.answered(this, error);
  }
}

let stampMs = 0;
let stampText = '';

/** The log lines' timestamp (computed once per millisecond: a busy tunnel logs many lines). */
export function stamp(): string {
  const now = Date.now();
  if (now !== stampMs) {
    stampMs = now;
    stampText = new Date(now).toISOString();
  }
  return stampText;
}

export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: string }).code;
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    return [code, error.message, cause?.code].filter(Boolean).join(' ') || error.name;
  }
  return String(error);
}

/** The WebSocket URL of the relay for a service base URL (keeps a path prefix). */
export function connectUrl(server: string): string {
  const url = new URL(server);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new Error(`--server must be an http:// or https:// URL, got "${server}"`);
  }
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.pathname = `${url.pathname.replace(/\/+$/, '')}${TUNNEL_CONNECT_PATH}`;
  url.search = '';
  url.hash = '';
  return url.toString();
}
