import { readFileSync, statSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import WebSocket from 'ws';
import { TUNNEL_TOKEN_ENV } from '../bots/tunnelSetup.ts';
import {
  CLOSE_AUTH_REJECTED,
  CLOSE_REPLACED,
  decodeFrame,
  encodeFrame,
  type FrameHeader,
  forwardableHeaders,
  type HeaderPairs,
  MAX_BODY_BYTES,
  MAX_FRAME_BYTES,
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
  private readonly inflight = new Map<number, () => void>();
  private readonly log: (line: string) => void;
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
    for (const abort of this.inflight.values()) abort();
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
    const ws = new WebSocket(this.wsUrl, {
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
      if (isBinary) this.onFrame(ws, data);
    });
    ws.on('close', (code, reasonBuffer) => {
      if (heartbeat) clearInterval(heartbeat);
      for (const abort of this.inflight.values()) abort();
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
    let header: FrameHeader;
    let body: Buffer;
    try {
      ({ header, body } = decodeFrame(data));
    } catch {
      return;
    }
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
      case 'request':
        void this.handleRequest(ws, header, Buffer.from(body));
        return;
      case 'cancel':
        this.inflight.get(header.id)?.();
        return;
      default:
        return;
    }
  }

  private async handleRequest(
    ws: WebSocket,
    request: Extract<FrameHeader, { type: 'request' }>,
    body: Buffer,
  ): Promise<void> {
    const started = performance.now();
    // A little longer than the relay waits, so that the relay's own timeout (504) answers first.
    const timeoutMs = Math.min(Math.max(request.timeout_ms || 10_000, 100), 120_000) + 1_000;
    let line: string;
    let timedOut = false;
    const call = localRequest(this.pool, {
      method: request.method,
      path: request.path,
      headers: flatten(forwardableHeaders(request.headers)),
      body,
      timeoutMs,
    });
    this.inflight.set(request.id, call.abort);
    const timer = setTimeout(() => {
      timedOut = true;
      call.abort();
    }, timeoutMs);
    try {
      const response = await call.response;
      send(
        ws,
        encodeFrame(
          {
            type: 'response',
            id: request.id,
            status: response.status,
            headers: response.headers, // the relay filters what it passes on
          },
          response.body,
        ),
      );
      line = `${request.method} ${request.path} → ${response.status}`;
    } catch (error) {
      const message = timedOut
        ? 'the local service did not answer in time'
        : `the local service at 127.0.0.1:${this.options.port} failed: ${describeError(error)}`;
      send(ws, encodeFrame({ type: 'error', id: request.id, message }));
      line = `${request.method} ${request.path} → error: ${message}`;
    } finally {
      clearTimeout(timer);
      this.inflight.delete(request.id);
    }
    this.log(`${stamp()} ${line} ${Math.round(performance.now() - started)} ms`);
  }
}

interface LocalResponse {
  status: number;
  headers: HeaderPairs;
  body: Buffer;
}

/**
 * One request to the local receiver through undici's dispatcher interface (no stream objects per
 * request: a busy tunnel relays thousands a second). The response body is bounded by MAX_BODY_BYTES.
 */
function localRequest(
  pool: Pool,
  options: { method: string; path: string; headers: string[]; body: Buffer; timeoutMs: number },
): { response: Promise<LocalResponse>; abort: () => void } {
  let abort: (() => void) | undefined;
  let aborted = false;
  const response = new Promise<LocalResponse>((resolve, reject) => {
    let status = 0;
    let headers: HeaderPairs = [];
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const fail = (error: Error) => {
      if (settled) return;
      settled = true;
      reject(error);
    };
    pool.dispatch(
      {
        method: options.method as 'GET',
        path: options.path,
        headers: options.headers,
        body: options.body.length > 0 ? options.body : null,
        headersTimeout: options.timeoutMs,
        bodyTimeout: options.timeoutMs,
      },
      {
        onRequestStart(controller) {
          abort = () => controller.abort(new Error('aborted'));
          if (aborted) abort();
        },
        onResponseStart(controller, statusCode) {
          status = statusCode;
          headers = rawHeaderPairs(controller.rawHeaders);
        },
        onResponseData(controller, chunk) {
          size += chunk.length;
          if (size > MAX_BODY_BYTES) {
            controller.abort(new Error(`the local response body exceeds ${MAX_BODY_BYTES} bytes`));
            return;
          }
          chunks.push(chunk);
        },
        onResponseEnd() {
          if (settled) return;
          settled = true;
          resolve({ status, headers, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
        },
        onResponseError(_controller, error) {
          fail(error);
        },
      },
    );
  });
  return {
    response,
    abort: () => {
      aborted = true;
      abort?.();
    },
  };
}

function rawHeaderPairs(raw: Buffer[] | string[] | Record<string, unknown> | null | undefined): HeaderPairs {
  const out: HeaderPairs = [];
  if (Array.isArray(raw)) {
    for (let i = 0; i + 1 < raw.length; i += 2) out.push([String(raw[i]), String(raw[i + 1])]);
  } else if (raw) {
    for (const [name, value] of Object.entries(raw)) {
      if (value === undefined) continue;
      for (const v of Array.isArray(value) ? value : [value]) out.push([name, String(v)]);
    }
  }
  return out;
}

function send(ws: WebSocket, frame: Buffer): void {
  if (ws.readyState === WebSocket.OPEN) sendFrame(ws as WebSocket & { _socket?: unknown }, frame);
}

/** Console output, one line per call, written once per tick (a busy tunnel logs many lines). */
function bufferedStdout(): (line: string) => void {
  let pending: string[] = [];
  return (line) => {
    if (pending.length === 0) {
      setImmediate(() => {
        const text = `${pending.join('\n')}\n`;
        pending = [];
        process.stdout.write(text);
      });
    }
    pending.push(line);
  };
}

function flatten(pairs: HeaderPairs): string[] {
  const out: string[] = [];
  for (const [name, value] of pairs) out.push(name, value);
  return out;
}

function stamp(): string {
  return new Date().toISOString();
}

function describeError(error: unknown): string {
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

const USAGE = `Usage: BOTPAY_TUNNEL_TOKEN=svc_tun_… botpay tunnel --server URL --port N [--path P]
       botpay tunnel --token-file FILE --server URL --port N [--path P]

Connects this machine to the Bot Payment Service so that webhooks sent to your bot's tunnel
hostname reach http://127.0.0.1:N (at the path they were sent to; P is your webhook path).

  --server URL       the service's address (BASE_URL), e.g. https://pay.example.com
                     (BOTPAY_SERVER if omitted)
  --port N           local port of your webhook receiver (1-65535)
  --path P           your webhook path, e.g. /hooks/service (shown in logs)
  --token-file FILE  a file holding the tunnel token (svc_tun_…); make it readable only by you
  --token T          the tunnel token itself: works, but every user of this machine can read
                     it in ps; prefer BOTPAY_TUNNEL_TOKEN or --token-file

The token comes from --token-file, else --token, else BOTPAY_TUNNEL_TOKEN.
Exit codes: 0 stopped, 2 bad arguments, 3 token rejected, 4 replaced by another client.`;

/**
 * The tunnel token from --token-file, --token or the environment (in that order), with warnings
 * for the ways it can leak: a token on the command line, a token file others can read.
 */
export function resolveTunnelToken(
  values: { token?: string; tokenFile?: string },
  env: NodeJS.ProcessEnv,
  warn: (line: string) => void,
): { token: string } | { problem: string } {
  if (values.tokenFile !== undefined) {
    let text: string;
    try {
      const mode = statSync(values.tokenFile).mode;
      if ((mode & 0o077) !== 0) {
        warn(
          `botpay tunnel: warning: ${values.tokenFile} can be read by other users (mode ${(mode & 0o777).toString(8)}); chmod 600 it`,
        );
      }
      text = readFileSync(values.tokenFile, 'utf8');
    } catch (error) {
      return { problem: `--token-file ${values.tokenFile} cannot be read (${describeError(error)})` };
    }
    const token = text.trim();
    if (!token) return { problem: `--token-file ${values.tokenFile} is empty` };
    return { token };
  }
  if (values.token !== undefined) {
    warn(
      `botpay tunnel: warning: --token puts the token on the command line, where every user of this machine can read it (ps); set ${TUNNEL_TOKEN_ENV} or use --token-file instead`,
    );
    if (values.token) return { token: values.token };
  }
  const fromEnv = env[TUNNEL_TOKEN_ENV]?.trim();
  if (fromEnv) return { token: fromEnv };
  return {
    problem: `the tunnel token is missing: set ${TUNNEL_TOKEN_ENV} to the tunnel_token from registration (or pass --token-file FILE)`,
  };
}

/** `botpay tunnel …`: runs until SIGINT/SIGTERM, a rejected token or a replacement. */
export async function tunnelCommand(args: string[]): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        server: { type: 'string' },
        token: { type: 'string' },
        'token-file': { type: 'string' },
        port: { type: 'string' },
        path: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    console.error(`${error instanceof Error ? error.message : error}\n\n${USAGE}`);
    return EXIT_USAGE;
  }
  if (values.help) {
    console.log(USAGE);
    return EXIT_OK;
  }
  const server = (values.server as string | undefined) ?? process.env.BOTPAY_SERVER ?? process.env.BASE_URL;
  const resolved = resolveTunnelToken(
    { token: values.token as string | undefined, tokenFile: values['token-file'] as string | undefined },
    process.env,
    (line) => console.error(line),
  );
  const token = 'token' in resolved ? resolved.token : undefined;
  const portText = values.port as string | undefined;
  const problems: string[] = [];
  if (!server) problems.push('--server is required (the service address, e.g. https://pay.example.com)');
  else {
    try {
      connectUrl(server);
    } catch (error) {
      problems.push((error as Error).message);
    }
  }
  if ('problem' in resolved) problems.push(resolved.problem);
  const port = Number(portText);
  if (!portText || !/^\d+$/.test(portText) || port < 1 || port > 65535) {
    problems.push('--port must be a port number between 1 and 65535');
  }
  const path = values.path as string | undefined;
  if (path !== undefined && !path.startsWith('/')) problems.push('--path must start with /');
  if (problems.length > 0) {
    console.error(`botpay tunnel: ${problems.join('; ')}\n\n${USAGE}`);
    return EXIT_USAGE;
  }

  const client = new TunnelClient({
    server: server!,
    token: token!,
    port,
    path,
    log: bufferedStdout(),
  });
  console.log(`${stamp()} tunnel: connecting to ${connectUrl(server!)} (forwarding to 127.0.0.1:${port})`);
  const onSignal = () => void client.stop();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const exit = await client.run();
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  if (exit.code !== EXIT_OK) console.error(`botpay tunnel: ${exit.message}`);
  return exit.code;
}
