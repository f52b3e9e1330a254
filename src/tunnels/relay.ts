import type { FastifyBaseLogger } from 'fastify';
import type { WebSocket } from 'ws';

/** WebSocket.OPEN (the type-only import has no value). */
const OPEN = 1;
import type { LocalTunnelRelay, RelayedRequest, RelayedResponse } from '../platform/context.ts';
import {
  CLOSE_AUTH_REJECTED,
  CLOSE_REPLACED,
  CLOSE_SERVICE_RESTART,
  type Codec,
  codecForSubprotocol,
  decodeFlat,
  encodeRequest,
  type FlatFrame,
  FrameError,
  forwardableHeaders,
  type HeaderPairs,
  keepForwardable,
  MAX_BODY_BYTES,
  sendFrame,
} from './protocol.ts';
import type { TunnelPolicy } from './service.ts';
import { InFlight } from './inflight.ts';

/** Why a relayed request failed; `status` is what an HTTP caller of the relay answers. */
export class TunnelError extends Error {
  constructor(
    readonly code:
      | 'tunnel_not_connected'
      | 'tunnel_timeout'
      | 'tunnel_upstream_error'
      | 'payload_too_large'
      | 'not_found'
      | 'method_not_allowed'
      | 'service_unavailable',
    message: string,
  ) {
    super(message);
    this.name = 'TunnelError';
  }
}

export interface TunnelRelayOptions {
  logger: FastifyBaseLogger;
  /** Public URL of a hostname (for the client's log line). */
  publicUrl(hostname: string): string;
  /** Timeout of a request arriving over HTTP (forward() callers pass their own). */
  requestTimeoutMs: number;
  /** Ping interval; a connection that missed one pong is dropped at the next tick. */
  heartbeatMs?: number;
  /** At most this many requests in flight per tunnel; more are refused at once (memory bound). */
  maxInFlight?: number;
  /**
   * At most this many bytes wait for one tunnel: frames not yet written to its socket
   * (bufferedAmount) plus the bodies being read for it. Above, requests are refused with 503 at
   * once, so a client that stops reading cannot make the service queue without limit. 8 MiB.
   */
  maxQueuedBytes?: number;
  /**
   * Returns the hostnames (of those given) whose tunnel token hash is no longer the one a
   * connection authenticated with (rotated on another instance), and the current forwarding
   * policy of the others (changed by the owner through any instance). Checked every `revalidateMs`.
   */
  revalidate?: (
    connections: Array<{ hostname: string; tokenHash: string }>,
  ) => Promise<{ revoked: string[]; policies: Map<string, TunnelPolicy> }>;
  revalidateMs?: number;
}

/**
 * What the instance cluster (cluster.ts) needs from the relay: which connections it holds (to lease
 * them) and the requests for hostnames it does not hold (handed to the holder instance).
 */
export interface RelayClusterHooks {
  attached(hostname: string, botId: string, connection: object): void;
  detached(hostname: string, connection: object): void;
  forward(request: RelayedRequest): Promise<RelayedResponse>;
}

/** A response as the client sent it: header pairs keep repeated fields (Set-Cookie) apart. */
export interface RawRelayedResponse {
  status: number;
  headers: HeaderPairs;
  body: Buffer;
}

/**
 * Who waits for the answer to a request sent with TunnelRelay.dispatch: exactly one of its methods
 * is called, once, never synchronously inside dispatch().
 */
export interface RelayWaiter {
  /**
   * The client's answer: `fields` are its forwardable header fields as [name, value, …] (repeated
   * ones kept apart), `body` a view of the frame, which nothing else holds.
   */
  answer(status: number, fields: string[], body: Buffer): void;
  fail(error: TunnelError): void;
}

/** A request relayed by dispatch(): header fields as a flat, already forwardable [name, value, …] list. */
export interface DispatchedRequest {
  hostname: string;
  method: string;
  path: string;
  fields: string[];
  body: Buffer;
  timeoutMs: number;
}

interface Pending {
  readonly id: number;
  waiter: RelayWaiter;
  /** performance.now() by which the client must have answered. */
  deadline: number;
  timeoutMs: number;
}

/** send()'s promise as a RelayWaiter. */
class PromiseWaiter implements RelayWaiter {
  constructor(
    private readonly resolve: (response: RawRelayedResponse) => void,
    private readonly reject: (error: TunnelError) => void,
  ) {}

  answer(status: number, fields: string[], body: Buffer): void {
    const headers: HeaderPairs = [];
    for (let i = 0; i + 1 < fields.length; i += 2)
      headers.push([fields[i] as string, fields[i + 1] as string]);
    this.resolve({ status, headers, body });
  }

  fail(error: TunnelError): void {
    this.reject(error);
  }
}

class TunnelConnection {
  readonly pending: InFlight<Pending>;
  /** Bytes of request bodies being read for this tunnel (see TunnelRelay.reserve). */
  reserved = 0;
  nextId = 1;
  alive = true;
  closed = false;
  /**
   * One timer per connection, not one per request: it fires at the earliest deadline of what is
   * in flight (or a little before, when that request was answered meanwhile) and is set again for
   * the next one then (see TunnelRelay.expire).
   */
  timer: NodeJS.Timeout | undefined;
  timerAt = Number.POSITIVE_INFINITY;

  constructor(
    readonly socket: WebSocket,
    /** The frame format the client speaks (by the subprotocol of the handshake). */
    readonly codec: Codec,
    readonly botId: string,
    readonly hostname: string,
    readonly tokenHash: string,
    public policy: TunnelPolicy,
    maxInFlight: number,
  ) {
    this.pending = new InFlight(maxInFlight);
  }

  failAll(error: TunnelError): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
    for (const p of this.pending.values()) {
      this.pending.delete(p.id);
      p.waiter.fail(error);
    }
  }
}

function congested(conn: TunnelConnection): TunnelError {
  const waiting = conn.socket.bufferedAmount + conn.reserved;
  return new TunnelError(
    'service_unavailable',
    `The bot's tunnel client is not reading fast enough (${Math.round(waiting / 1024)} KiB are waiting for it); retry shortly.`,
  );
}

/**
 * The managed-tunnel relay of this process: one WebSocket per connected bot hostname, many
 * requests multiplexed over it by request id. Used by the HTTP interception (routes.ts) and by
 * the webhook worker through `ctx.tunnelRelay.forward`.
 */
export class TunnelRelay implements LocalTunnelRelay {
  private readonly connections = new Map<string, TunnelConnection>();
  private readonly heartbeatTimer: NodeJS.Timeout;
  private readonly revalidateTimer: NodeJS.Timeout | undefined;
  private closing = false;
  /** Set when instances share tunnels (PostgreSQL): see cluster.ts. */
  cluster: RelayClusterHooks | undefined;
  readonly heartbeatMs: number;
  readonly maxInFlight: number;
  readonly maxQueuedBytes: number;

  constructor(private readonly options: TunnelRelayOptions) {
    this.heartbeatMs = options.heartbeatMs ?? 20_000;
    this.maxInFlight = options.maxInFlight ?? 256;
    this.maxQueuedBytes = options.maxQueuedBytes ?? 8 * MAX_BODY_BYTES;
    // Network heartbeats run on real time, not ctx.clock: they measure a live socket.
    this.heartbeatTimer = setInterval(() => this.heartbeat(), this.heartbeatMs);
    this.heartbeatTimer.unref();
    if (options.revalidate) {
      this.revalidateTimer = setInterval(() => void this.revalidate(), options.revalidateMs ?? 30_000);
      this.revalidateTimer.unref();
    }
  }

  get requestTimeoutMs(): number {
    return this.options.requestTimeoutMs;
  }

  hasConnection(hostname: string): boolean {
    return this.connections.has(hostname.toLowerCase());
  }

  /**
   * Bytes waiting for the hostname's tunnel: frames not yet written to its socket plus the bodies
   * being read for it (0 when not connected).
   */
  queuedBytes(hostname: string): number {
    const conn = this.connections.get(hostname.toLowerCase());
    return conn ? conn.socket.bufferedAmount + conn.reserved : 0;
  }

  /**
   * Reserves room for a request body of up to `bytes` about to be read for the hostname: a
   * release function, or a TunnelError (503) when the tunnel already has too much waiting. Release
   * before send(), which counts the frame itself.
   */
  reserve(hostname: string, bytes: number): (() => void) | TunnelError {
    const conn = this.connections.get(hostname.toLowerCase());
    if (!conn) return () => {};
    if (conn.socket.bufferedAmount + conn.reserved + bytes > this.maxQueuedBytes) return congested(conn);
    conn.reserved += bytes;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      conn.reserved -= bytes;
    };
  }

  /** Whether forward() can reach the hostname's tunnel: connected here, or possibly on another instance. */
  canDeliver(hostname: string): boolean {
    return this.cluster !== undefined || this.hasConnection(hostname);
  }

  /** Closes the connection if it is still the hostname's (cluster: the lease went to a newer one). */
  dropConnection(hostname: string, connection: object, code: number, reason: string): void {
    const conn = this.connections.get(hostname);
    if (conn && conn === connection) this.drop(conn, code, reason);
  }

  connectionCount(): number {
    return this.connections.size;
  }

  /** Takes over an authenticated socket; an older connection for the hostname is closed. */
  attach(socket: WebSocket, bot: { id: string; hostname: string; tokenHash: string } & TunnelPolicy): void {
    const hostname = bot.hostname.toLowerCase();
    if (this.closing) {
      socket.close(CLOSE_SERVICE_RESTART, 'service is shutting down');
      return;
    }
    const policy = { forward: bot.forward, webhookPath: bot.webhookPath };
    const codec = codecForSubprotocol(socket.protocol);
    const conn = new TunnelConnection(
      socket,
      codec,
      bot.id,
      hostname,
      bot.tokenHash,
      policy,
      this.maxInFlight,
    );
    const previous = this.connections.get(hostname);
    this.connections.set(hostname, conn);
    this.cluster?.attached(hostname, bot.id, conn);
    if (previous) {
      this.options.logger.info({ bot_id: bot.id, hostname }, 'tunnel client replaced by a new connection');
      this.drop(previous, CLOSE_REPLACED, 'replaced by a newer connection with the same token');
    }

    socket.on('pong', () => {
      conn.alive = true;
    });
    socket.on('message', (data, isBinary) => this.onMessage(conn, data as Buffer, isBinary));
    socket.on('close', () => this.onClose(conn));
    socket.on('error', () => {
      // 'close' follows; the error itself (e.g. ECONNRESET) needs no more than that.
    });

    socket.send(
      codec.encode({
        type: 'hello',
        version: codec.version,
        hostname,
        public_url: this.options.publicUrl(hostname),
        max_body_bytes: MAX_BODY_BYTES,
        request_timeout_ms: this.options.requestTimeoutMs,
        heartbeat_ms: this.heartbeatMs,
      }),
    );
    this.options.logger.info(
      { bot_id: bot.id, hostname, protocol: codec.version },
      'tunnel client connected',
    );
  }

  /** Closes the hostname's connection (token rotated): the client is told its token is no longer valid. */
  disconnect(hostname: string, code = CLOSE_AUTH_REJECTED, reason = 'tunnel token revoked'): boolean {
    const conn = this.connections.get(hostname.toLowerCase());
    if (!conn) return false;
    this.drop(conn, code, reason);
    return true;
  }

  /** Applies a changed forwarding policy to the hostname's connection (if it is connected here). */
  setPolicy(hostname: string, policy: TunnelPolicy): void {
    const conn = this.connections.get(hostname.toLowerCase());
    if (conn) conn.policy = { ...policy };
  }

  /**
   * Whether a request arriving over HTTP may be forwarded: with 'webhook_only' (the default) only
   * POST to the webhook path (any query string) reaches the bot's machine; another path is 404,
   * another method on the webhook path 405. Undefined when allowed (or nobody is connected: the
   * caller answers that). The worker's own deliveries (forward()) are always POSTs to that path.
   */
  refusal(hostname: string, method: string, url: string): TunnelError | undefined {
    const conn = this.connections.get(hostname.toLowerCase());
    if (!conn || conn.policy.forward === 'all') return undefined;
    const query = url.indexOf('?');
    const path = query >= 0 ? url.slice(0, query) : url;
    const only = `The tunnel forwards only POST ${conn.policy.webhookPath} (the bot's owner can allow more).`;
    if (path !== conn.policy.webhookPath) return new TunnelError('not_found', only);
    if (method !== 'POST') return new TunnelError('method_not_allowed', only);
    return undefined;
  }

  /** The worker's entry point (LocalTunnelRelay): headers in and out as plain records. */
  async forward(request: RelayedRequest): Promise<RelayedResponse> {
    if (this.cluster && !this.hasConnection(request.hostname)) return this.cluster.forward(request);
    const raw = await this.send({ ...request, headers: forwardableHeaders(Object.entries(request.headers)) });
    const headers: Record<string, string> = {};
    for (const [name, value] of raw.headers) {
      const key = name.toLowerCase();
      headers[key] = headers[key] === undefined ? value : `${headers[key]}, ${value}`;
    }
    return { status: raw.status, headers, body: raw.body };
  }

  /**
   * Sends one request through the hostname's tunnel and waits for its response. `headers` must
   * already be forwardable (see forwardableHeaders); the response's headers are filtered here.
   */
  send(request: Omit<RelayedRequest, 'headers'> & { headers: HeaderPairs }): Promise<RawRelayedResponse> {
    return new Promise<RawRelayedResponse>((resolve, reject) => {
      const { headers, ...rest } = request;
      const refused = this.dispatch({ ...rest, fields: headers.flat() }, new PromiseWaiter(resolve, reject));
      if (refused) reject(refused);
    });
  }

  /**
   * send() without a promise (the HTTP relay path, many thousands a second): the request is sent
   * and `waiter` told the outcome later; a request refused at once (not connected, too large, too
   * many in flight, congested) is returned instead, and the waiter is never called.
   */
  dispatch(request: DispatchedRequest, waiter: RelayWaiter): TunnelError | undefined {
    const conn = this.connections.get(request.hostname.toLowerCase());
    // A socket already closing has not emitted 'close' yet: what it was sent would be lost.
    if (!conn || conn.closed || conn.socket.readyState !== OPEN) {
      return new TunnelError(
        'tunnel_not_connected',
        `No tunnel client is connected for ${request.hostname}.`,
      );
    }
    if (request.body.length > MAX_BODY_BYTES) {
      return new TunnelError('payload_too_large', `The request body exceeds ${MAX_BODY_BYTES} bytes.`);
    }
    if (conn.pending.size >= this.maxInFlight) {
      return new TunnelError(
        'tunnel_upstream_error',
        `The tunnel already has ${this.maxInFlight} requests in flight; retry shortly.`,
      );
    }
    // Ids are unsigned 32-bit in version 2 frames: after 2^32 - 1 they start again at 1, past any
    // still in flight.
    let id: number;
    do {
      id = conn.nextId;
      conn.nextId = id >= 0xffff_ffff ? 1 : id + 1;
    } while (conn.pending.has(id));
    let frame: Buffer;
    try {
      frame = encodeRequest(
        conn.codec,
        id,
        request.method.toUpperCase(),
        request.path.startsWith('/') ? request.path : `/${request.path}`,
        request.fields,
        request.timeoutMs,
        request.body,
      );
    } catch (error) {
      if (!(error instanceof FrameError)) throw error;
      return new TunnelError('payload_too_large', `The request cannot be relayed: ${error.message}.`);
    }
    // Backpressure: a client that does not read leaves frames in its socket's buffer; above the
    // bound nothing more is queued for it.
    if (conn.socket.bufferedAmount + conn.reserved + frame.length > this.maxQueuedBytes) {
      return congested(conn);
    }
    const deadline = performance.now() + request.timeoutMs;
    conn.pending.set({ id, waiter, deadline, timeoutMs: request.timeoutMs });
    if (deadline < conn.timerAt) this.arm(conn, deadline);
    // No callback per frame: a write that fails errors the socket, and its 'close' fails all that
    // is in flight (onClose).
    sendFrame(conn.socket, frame);
    return undefined;
  }

  /** Sets the connection's timer for `at` (performance.now()), replacing a later one. */
  private arm(conn: TunnelConnection, at: number): void {
    if (conn.timer) clearTimeout(conn.timer);
    conn.timerAt = at;
    conn.timer = setTimeout(this.expireBound, Math.max(1, Math.ceil(at - performance.now())), conn);
    // What is in flight holds the socket (and the process) open; this timer need not.
    conn.timer.unref();
  }

  private readonly expireBound = (conn: TunnelConnection): void => this.expire(conn);

  /** The connection's timer: times out what is past its deadline, sets the timer for the next. */
  private expire(conn: TunnelConnection): void {
    conn.timer = undefined;
    conn.timerAt = Number.POSITIVE_INFINITY;
    if (conn.closed) return;
    const now = performance.now();
    let next = Number.POSITIVE_INFINITY;
    for (const p of conn.pending.values()) {
      const id = p.id;
      if (p.deadline > now) {
        if (p.deadline < next) next = p.deadline;
        continue;
      }
      conn.pending.delete(id);
      sendFrame(conn.socket, conn.codec.encode({ type: 'cancel', id }));
      p.waiter.fail(
        new TunnelError('tunnel_timeout', `The bot's local service did not answer within ${p.timeoutMs} ms.`),
      );
    }
    if (next !== Number.POSITIVE_INFINITY && !conn.closed) this.arm(conn, next);
  }

  /** One heartbeat tick: drop connections that did not answer the previous ping, ping the rest. */
  heartbeat(): void {
    for (const conn of this.connections.values()) {
      if (!conn.alive) {
        this.options.logger.info(
          { bot_id: conn.botId, hostname: conn.hostname },
          'tunnel client missed a heartbeat; dropping',
        );
        conn.socket.terminate();
        this.onClose(conn);
        continue;
      }
      conn.alive = false;
      try {
        conn.socket.ping();
      } catch {
        // A socket that cannot be pinged is closing; 'close' cleans it up.
      }
    }
  }

  /** Drops connections whose token was rotated elsewhere (another instance took the owner's call). */
  async revalidate(): Promise<void> {
    if (!this.options.revalidate || this.connections.size === 0 || this.closing) return;
    const list = [...this.connections.values()].map((c) => ({
      hostname: c.hostname,
      tokenHash: c.tokenHash,
    }));
    try {
      const { revoked, policies } = await this.options.revalidate(list);
      for (const hostname of revoked) {
        const conn = this.connections.get(hostname);
        if (conn && list.some((l) => l.hostname === hostname && l.tokenHash === conn.tokenHash)) {
          this.drop(conn, CLOSE_AUTH_REJECTED, 'tunnel token revoked');
        }
      }
      for (const [hostname, policy] of policies) this.setPolicy(hostname, policy);
    } catch (error) {
      this.options.logger.warn({ err: error }, 'tunnel token revalidation failed');
    }
  }

  /** Stops timers, fails what is in flight and closes every connection (the client reconnects). */
  close(): void {
    this.closing = true;
    clearInterval(this.heartbeatTimer);
    if (this.revalidateTimer) clearInterval(this.revalidateTimer);
    for (const conn of [...this.connections.values()]) {
      this.drop(conn, CLOSE_SERVICE_RESTART, 'service is restarting');
    }
  }

  private drop(conn: TunnelConnection, code: number, reason: string): void {
    if (this.connections.get(conn.hostname) === conn) {
      this.connections.delete(conn.hostname);
      this.cluster?.detached(conn.hostname, conn);
    }
    if (!conn.closed) {
      conn.closed = true;
      conn.failAll(new TunnelError('tunnel_not_connected', 'The tunnel client disconnected.'));
      conn.socket.close(code, reason);
      // A peer that never completes the closing handshake is cut after a moment.
      setTimeout(() => conn.socket.terminate(), 2_000).unref();
    }
  }

  private onClose(conn: TunnelConnection): void {
    if (this.connections.get(conn.hostname) === conn) {
      this.connections.delete(conn.hostname);
      this.cluster?.detached(conn.hostname, conn);
      this.options.logger.info({ bot_id: conn.botId, hostname: conn.hostname }, 'tunnel client disconnected');
    }
    conn.closed = true;
    conn.failAll(new TunnelError('tunnel_not_connected', 'The tunnel client disconnected.'));
  }

  private onMessage(conn: TunnelConnection, data: Buffer, isBinary: boolean): void {
    if (!isBinary) return;
    let frame: FlatFrame;
    try {
      frame = decodeFlat(conn.codec, data);
    } catch (error) {
      // Refused, never thrown: a hostile or broken client cannot take the service down.
      const reason = error instanceof FrameError ? error.message : 'undecodable frame';
      this.options.logger.warn({ bot_id: conn.botId, reason }, 'malformed tunnel frame');
      return;
    }
    if (frame.type === 'other') {
      const header = frame.frame.header;
      if (header.type !== 'error') return;
      const p = conn.pending.get(header.id);
      if (!p) return; // late answer to a request that timed out
      conn.pending.delete(header.id);
      p.waiter.fail(new TunnelError('tunnel_upstream_error', header.message.slice(0, 300)));
      return;
    }
    if (frame.type !== 'response') return;
    const p = conn.pending.get(frame.id);
    if (!p) return; // late answer to a request that timed out
    conn.pending.delete(frame.id);
    if (frame.status < 200 || frame.status > 599 || frame.body.length > MAX_BODY_BYTES) {
      p.waiter.fail(new TunnelError('tunnel_upstream_error', 'The tunnel client sent an invalid response.'));
      return;
    }
    // The body is a view of the frame, which nothing else holds: no copy.
    p.waiter.answer(frame.status, keepForwardable(frame.fields), frame.body);
  }
}
