import { createHmac, hash, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { Agent } from 'undici';
import type { RelayedRequest, RelayedResponse } from '../platform/context.ts';
import type { Db } from '../platform/db/port.ts';
import { present } from '../platform/present.ts';
import { BoundedCall } from './boundedCall.ts';
import {
  CLOSE_REPLACED,
  CLOSE_SERVICE_RESTART,
  forwardableHeaders,
  type HeaderPairs,
  keepForwardable,
  MAX_BODY_BYTES,
} from './protocol.ts';
import {
  type RawRelayedResponse,
  type RelayClusterHooks,
  type RelayWaiter,
  TunnelError,
  type TunnelRelay,
} from './relay.ts';

// Tunnels shared by every instance (PostgreSQL). A bot's tunnel WebSocket lives on the instance it
// reached; that instance holds a lease on the hostname (table tunnel_leases: its instance id, its
// internal URL, an epoch), renews it while the socket is open and deletes it when it closes. Any
// other instance that receives a request for the hostname — over HTTP, or from its webhook worker —
// reads the lease and hands the request to the holder over HTTP at INTERNAL_PATH, authenticated with
// an HMAC keyed from SECRET_KEY (see sign/verify below). The holder passes it to its own socket and
// never forwards further: the endpoint is no proxy.
//
// One holder per hostname: a new connection always takes the lease over (a new epoch from a
// sequence, so the row's epoch only grows) and announces it with NOTIFY; the instance holding an
// older epoch closes its socket (4409, replaced) at once. If the notification is lost, the renewal
// (every third of the lease) finds the row taken and closes it then; an instance that cannot renew
// for a whole lease closes every socket it holds (the clients reconnect through the load balancer).

export const INTERNAL_PATH = '/internal/v1/tunnel/relay';
const CHANNEL = 'botpay_tunnel_leases';
const SIGNATURE_HEADER = 'x-botpay-cluster';
/** A signed request is accepted this long around its timestamp; its nonce is remembered as long. */
const MAX_SKEW_MS = 30_000;
const LOOKUP_CACHE_MS = 1_000;
const MAX_META_BYTES = 128 * 1024;

type Kind = 'http' | 'webhook';

interface Holder {
  instanceId: string;
  url: string;
}

interface Held {
  connection: object;
  botId: string;
  /** Resolves with the lease's epoch once written (null: not written, e.g. no internal URL yet). */
  acquiring: Promise<string | null>;
  epoch: string | null;
}

/** A request as an instance hands it to the holder: the metadata, then the body. */
interface ForwardMeta {
  hostname: string;
  method: string;
  path: string;
  headers: HeaderPairs;
  timeout_ms: number;
  kind: Kind;
}

type AnswerMeta =
  | { status: number; headers: HeaderPairs }
  | { error: TunnelError['code'] | 'not_holder'; message: string };

export interface TunnelClusterOptions {
  db: Db;
  logger: FastifyBaseLogger;
  relay: TunnelRelay;
  secretKey: string;
  leaseMs: number;
  /** This instance's address for the others (INTERNAL_URL, or loopback and the listening port). */
  internalUrl(): string | undefined;
  /** The canonical tunnel hostname, or null when the value is not one of this service's. */
  validHostname(hostname: string): string | null;
}

/** The cluster key: derived from SECRET_KEY, used for nothing else. */
export function clusterKey(secretKey: string): Buffer {
  return Buffer.from(
    hkdfSync('sha256', Buffer.from(secretKey, 'utf8'), Buffer.alloc(0), 'botpay:tunnel-cluster:v1', 32),
  );
}

// One-shot (no Hash object per call): each forwarded request hashes its body on both instances.
const sha256 = (data: Buffer | string) => hash('sha256', data, 'hex');

/**
 * A nonce for each signed request: unique, not secret (the HMAC protects the request; the holder
 * refuses a nonce it saw within the window). A random prefix per process and a counter, 32 hex
 * digits like 16 random bytes, without a call into the random generator per request.
 */
const noncePrefix = randomBytes(8).toString('hex');
let nonceCounter = 0;
export function nextNonce(): string {
  nonceCounter = nonceCounter >= Number.MAX_SAFE_INTEGER ? 1 : nonceCounter + 1;
  return noncePrefix + nonceCounter.toString(16).padStart(16, '0');
}

/**
 * The signature of a request to INTERNAL_PATH: `v1,t=<ms>,n=<nonce>,i=<target instance>,s=<hex>`,
 * s = HMAC-SHA256(cluster key, "req" ‖ t ‖ n ‖ target instance ‖ method ‖ path ‖ sha256(body)). The
 * target instance binds it to one holder (whose nonce cache stops replays); t bounds it in time.
 */
export function signRequest(
  key: Buffer,
  target: string,
  body: Buffer,
  at = Date.now(),
  nonce = nextNonce(),
): string {
  const mac = createHmac('sha256', key)
    .update(`req\n${at}\n${nonce}\n${target}\nPOST\n${INTERNAL_PATH}\n${sha256(body)}`)
    .digest('hex');
  return `v1,t=${at},n=${nonce},i=${target},s=${mac}`;
}

function signAnswer(key: Buffer, nonce: string, body: Buffer): string {
  return createHmac('sha256', key)
    .update(`res\n${nonce}\n${sha256(body)}`)
    .digest('hex');
}

function sameHex(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function frame(meta: object, body: Buffer = Buffer.alloc(0)): Buffer {
  const json = Buffer.from(JSON.stringify(meta), 'utf8');
  const length = Buffer.alloc(4);
  length.writeUInt32BE(json.length);
  return Buffer.concat([length, json, body]);
}

function unframe(data: Buffer): { meta: unknown; body: Buffer } | null {
  if (data.length < 4) return null;
  const n = data.readUInt32BE(0);
  if (n > MAX_META_BYTES || 4 + n > data.length) return null;
  try {
    return { meta: JSON.parse(data.subarray(4, 4 + n).toString('utf8')), body: data.subarray(4 + n) };
  } catch {
    return null;
  }
}

const isPairs = (value: unknown): value is HeaderPairs =>
  Array.isArray(value) &&
  value.every(
    (p) => Array.isArray(p) && p.length === 2 && typeof p[0] === 'string' && typeof p[1] === 'string',
  );

/** Not delivered anywhere: the holder is gone or is no longer the holder (safe to retry elsewhere). */
class Unreached extends Error {}

const notConnected = (hostname: string) =>
  new TunnelError('tunnel_not_connected', `No tunnel client is connected for ${hostname}.`);

export class TunnelCluster implements RelayClusterHooks {
  readonly instanceId = randomBytes(12).toString('hex');
  private readonly key: Buffer;
  private readonly held = new Map<string, Held>();
  private readonly lookups = new Map<string, { holder: Holder | null; until: number }>();
  private readonly nonces = new Map<string, number>();
  private readonly pending = new Set<Promise<unknown>>();
  // undici is loaded with the first hand-over (never on the embedded database, which has no cluster).
  private undici: Promise<Agent> | undefined;
  private readonly renewTimer: NodeJS.Timeout;
  private unlisten: (() => Promise<void>) | undefined;
  private lastRenewed = Date.now();
  private lastPruned = 0;
  private closed = false;

  constructor(private readonly options: TunnelClusterOptions) {
    this.key = clusterKey(options.secretKey);
    this.renewTimer = setInterval(() => void this.renew(), Math.max(1_000, Math.floor(options.leaseMs / 3)));
    this.renewTimer.unref();
    options.relay.cluster = this;
  }

  /** Subscribes to lease changes (takeovers close the older socket at once). */
  async start(): Promise<void> {
    this.unlisten = await this.options.db.listen(CHANNEL, (payload) => {
      if (payload === '*') {
        this.lookups.clear();
        void this.renew();
        return;
      }
      for (const item of payload.split(',')) {
        const [hostname, epoch] = item.split(' ');
        if (hostname && epoch) this.onTakeover(hostname, epoch);
      }
    });
  }

  // ---- leases ---------------------------------------------------------------------------------

  attached(hostname: string, botId: string, connection: object): void {
    const entry: Held = { connection, botId, epoch: null, acquiring: Promise.resolve(null) };
    // After the write of a connection it replaces here (if still under way): the newer one must get
    // the larger epoch.
    const previous = this.held.get(hostname)?.acquiring ?? Promise.resolve(null);
    entry.acquiring = previous
      .then(() => this.acquire(hostname, botId))
      .then(
        (epoch) => {
          entry.epoch = epoch;
          return epoch;
        },
        (error: unknown) => {
          this.options.logger.warn({ err: error, hostname }, 'tunnel lease could not be written; closing');
          if (this.held.get(hostname) === entry) {
            this.options.relay.dropConnection(
              hostname,
              connection,
              CLOSE_SERVICE_RESTART,
              'lease unavailable',
            );
          }
          return null;
        },
      );
    this.held.set(hostname, entry);
    this.lookups.delete(hostname);
  }

  /** Settles once the lease of the hostname's connection here is written (or could not be). */
  leaseWritten(hostname: string): Promise<unknown> {
    return this.held.get(hostname)?.acquiring ?? Promise.resolve(null);
  }

  detached(hostname: string, connection: object): void {
    const entry = this.held.get(hostname);
    if (!entry || entry.connection !== connection) return;
    this.held.delete(hostname);
    this.track(
      entry.acquiring.then((epoch) =>
        epoch === null
          ? undefined
          : this.options.db.query('DELETE FROM tunnel_leases WHERE hostname = $1 AND epoch = $2', [
              hostname,
              epoch,
            ]),
      ),
    );
  }

  private async acquire(hostname: string, botId: string): Promise<string | null> {
    const url = this.options.internalUrl();
    if (!url || this.closed) return null;
    // nextval() in SET runs after the row lock is taken: a later writer always gets a larger epoch.
    const rows = await this.options.db.query<{ epoch: string }>(
      `WITH up AS (
         INSERT INTO tunnel_leases (hostname, bot_id, instance_id, internal_url, epoch, expires_at)
         VALUES ($1, $2, $3, $4, nextval('tunnel_lease_epochs'), now() + make_interval(secs => $5))
         ON CONFLICT (hostname) DO UPDATE SET bot_id = EXCLUDED.bot_id, instance_id = EXCLUDED.instance_id,
           internal_url = EXCLUDED.internal_url, epoch = nextval('tunnel_lease_epochs'),
           acquired_at = now(), expires_at = EXCLUDED.expires_at
         RETURNING epoch)
       SELECT epoch::text AS epoch, pg_notify('${CHANNEL}', $1::text || ' ' || epoch::text) FROM up`,
      [hostname, botId, this.instanceId, url, this.options.leaseMs / 1000],
    );
    return present(rows[0], 'the lease row just written').epoch;
  }

  /** Another connection took the hostname (or this one did: then nothing happens). */
  private onTakeover(hostname: string, epoch: string): void {
    this.lookups.delete(hostname);
    const entry = this.held.get(hostname);
    if (!entry) return;
    void entry.acquiring.then((mine) => {
      if (mine === null || this.held.get(hostname) !== entry) return;
      if (BigInt(epoch) > BigInt(mine)) this.replaced(hostname, entry);
    });
  }

  private replaced(hostname: string, entry: Held): void {
    this.options.logger.info(
      { bot_id: entry.botId, hostname },
      'tunnel taken over by a connection on another instance',
    );
    this.options.relay.dropConnection(
      hostname,
      entry.connection,
      CLOSE_REPLACED,
      'replaced by a newer connection with the same token',
    );
  }

  /** Renews this instance's leases; a lease found taken over closes its socket. */
  async renew(): Promise<void> {
    if (this.closed) return;
    const mine = [...this.held.entries()].filter(([, e]) => e.epoch !== null);
    try {
      await this.options.db.query(
        "DELETE FROM tunnel_leases WHERE expires_at < now() - interval '5 minutes'",
      );
      if (mine.length > 0) {
        const rows = await this.options.db.query<{ hostname: string }>(
          `UPDATE tunnel_leases l SET expires_at = now() + make_interval(secs => $3)
             FROM unnest($1::text[], $2::bigint[]) AS h(hostname, epoch)
            WHERE l.hostname = h.hostname AND l.epoch = h.epoch
           RETURNING l.hostname`,
          [mine.map(([h]) => h), mine.map(([, e]) => e.epoch), this.options.leaseMs / 1000],
        );
        const renewed = new Set(rows.map((r) => r.hostname));
        for (const [hostname, entry] of mine) {
          if (!renewed.has(hostname) && this.held.get(hostname) === entry) this.replaced(hostname, entry);
        }
      }
      this.lastRenewed = Date.now();
    } catch (error) {
      this.options.logger.warn({ err: error }, 'tunnel lease renewal failed');
      if (Date.now() - this.lastRenewed > this.options.leaseMs) {
        // The leases may have expired and been taken: serve none rather than a second copy.
        for (const [hostname, entry] of [...this.held]) {
          this.options.relay.dropConnection(hostname, entry.connection, CLOSE_SERVICE_RESTART, 'lease lost');
        }
      }
    }
  }

  /** The instance holding the hostname's live lease (not this one), or null. */
  private async holder(hostname: string, fresh: boolean): Promise<Holder | null> {
    const now = Date.now();
    const cached = this.lookups.get(hostname);
    if (!fresh && cached && cached.until > now) return cached.holder;
    const rows = await this.options.db.query<{ instance_id: string; internal_url: string }>(
      'SELECT instance_id, internal_url FROM tunnel_leases WHERE hostname = $1 AND expires_at > now()',
      [hostname],
    );
    const row = rows[0];
    const holder =
      row && row.instance_id !== this.instanceId
        ? { instanceId: row.instance_id, url: row.internal_url }
        : null;
    if (this.lookups.size > 10_000) this.lookups.clear();
    this.lookups.set(hostname, { holder, until: now + LOOKUP_CACHE_MS });
    return holder;
  }

  // ---- the instance that received the request ---------------------------------------------------

  /**
   * The worker's deliveries for a tunnel held elsewhere (RelayClusterHooks.forward); rejects with
   * tunnel_not_connected when nobody holds it, like the relay.
   */
  async forward(request: RelayedRequest): Promise<RelayedResponse> {
    const raw = await this.send({
      ...request,
      headers: forwardableHeaders(Object.entries(request.headers)),
      kind: 'webhook',
    });
    const headers: Record<string, string> = {};
    for (const [name, value] of raw.headers) {
      const key = name.toLowerCase();
      headers[key] = headers[key] === undefined ? value : `${headers[key]}, ${value}`;
    }
    return { status: raw.status, headers, body: raw.body };
  }

  /**
   * Hands a request for a hostname not connected here to the instance holding it. Throws a
   * TunnelError as the relay would (tunnel_not_connected when nobody holds it).
   */
  async send(
    request: Omit<ForwardMeta, 'timeout_ms'> & { body: Buffer; timeoutMs: number },
  ): Promise<RawRelayedResponse> {
    const meta: ForwardMeta = {
      hostname: request.hostname.toLowerCase(),
      method: request.method.toUpperCase(),
      path: request.path.startsWith('/') ? request.path : `/${request.path}`,
      headers: request.headers,
      timeout_ms: request.timeoutMs,
      kind: request.kind,
    };
    if (request.body.length > MAX_BODY_BYTES) {
      throw new TunnelError('payload_too_large', `The request body exceeds ${MAX_BODY_BYTES} bytes.`);
    }
    const body = frame(meta, request.body);
    for (let attempt = 0; ; attempt++) {
      let holder = await this.holder(meta.hostname, attempt > 0);
      // A webhook is never judged "not connected" on a cached look: a delivery that finds no client
      // waits for it or counts as failed (src/webhooks/tunnelWait.ts), and the client may have just
      // connected on another instance.
      if (!holder && attempt === 0 && meta.kind === 'webhook')
        holder = await this.holder(meta.hostname, true);
      if (!holder) throw notConnected(meta.hostname);
      try {
        return await this.call(holder, body, meta.timeout_ms);
      } catch (error) {
        if (!(error instanceof Unreached)) throw error;
        this.lookups.delete(meta.hostname);
        // Never delivered: one more look (the client may have moved to another instance).
        if (attempt >= 1) throw notConnected(meta.hostname);
      }
    }
  }

  private async call(holder: Holder, body: Buffer, timeoutMs: number): Promise<RawRelayedResponse> {
    const nonce = nextNonce();
    const signature = signRequest(this.key, holder.instanceId, body, Date.now(), nonce);
    this.undici ??= import('undici').then(
      (undici) => new undici.Agent({ keepAliveTimeout: 30_000, connections: 64 }),
    );
    const agent = await this.undici;
    // undici's dispatch API with a handler object: no response stream, body mixin or promise per
    // chunk (a request through a non-holder costs this instance an HTTP client hop on top of its
    // HTTP server one).
    const answered = await new Promise<HolderAnswer | Error>((resolve) => {
      agent.dispatch(
        {
          origin: holder.url,
          path: INTERNAL_PATH,
          method: 'POST',
          headers: ['content-type', 'application/octet-stream', SIGNATURE_HEADER, signature],
          body,
          headersTimeout: timeoutMs + 5_000,
          bodyTimeout: timeoutMs + 5_000,
        },
        new HolderCall(resolve),
      );
    });
    if (answered instanceof Error) {
      if (answered instanceof TunnelError) throw answered;
      const code = (answered as { code?: string }).code;
      if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH') throw new Unreached();
      throw new TunnelError('tunnel_upstream_error', 'The instance holding the tunnel did not answer.');
    }
    const { status, signature: answerSignature, body: answer } = answered;
    if (
      status !== 200 ||
      !answerSignature ||
      !sameHex(answerSignature, signAnswer(this.key, nonce, answer))
    ) {
      // Not a holder of ours (another service at that address, or a stale lease): not delivered.
      this.options.logger.warn({ status, holder: holder.url }, 'tunnel holder refused a forwarded request');
      throw new Unreached();
    }
    const parsed = unframe(answer);
    const meta = parsed?.meta as AnswerMeta | undefined;
    if (!parsed || !meta || typeof meta !== 'object') {
      throw new TunnelError(
        'tunnel_upstream_error',
        'The instance holding the tunnel sent an invalid answer.',
      );
    }
    if ('error' in meta) {
      if (meta.error === 'not_holder') throw new Unreached();
      throw new TunnelError(meta.error, String(meta.message).slice(0, 300));
    }
    if (!isPairs(meta.headers) || !Number.isInteger(meta.status)) {
      throw new TunnelError(
        'tunnel_upstream_error',
        'The instance holding the tunnel sent an invalid answer.',
      );
    }
    // The body is a view of the answer, which nothing else holds.
    return { status: meta.status, headers: forwardableHeaders(meta.headers), body: parsed.body };
  }

  // ---- the holder -------------------------------------------------------------------------------

  /**
   * POST INTERNAL_PATH: a request another instance hands to this one. Refused (401) unless signed
   * with the cluster key for this instance within the time window and never seen before; passed
   * only to a tunnel connected here (otherwise `not_holder`, never forwarded further).
   */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const refuse = (status: number, error: string, message: string) => {
      req.resume();
      const text = JSON.stringify({ error, message });
      res.writeHead(status, {
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(text),
        connection: 'close', // a refused caller gets no kept-alive connection to stream into
      });
      res.end(text);
    };
    if (req.method !== 'POST') return refuse(405, 'method_not_allowed', 'POST only.');
    const header = req.headers[SIGNATURE_HEADER];
    const parts = /^v1,t=(\d{1,15}),n=([0-9a-f]{32}),i=([0-9a-f]{1,64}),s=([0-9a-f]{64})$/.exec(
      typeof header === 'string' ? header : '',
    );
    if (!parts) return refuse(401, 'unauthorized', 'A signed request from another instance is required.');
    const [, t, nonce, target, mac] = parts as unknown as [string, string, string, string, string];
    const at = Number(t);
    if (target !== this.instanceId || Math.abs(Date.now() - at) > MAX_SKEW_MS) {
      return refuse(401, 'unauthorized', 'A signed request from another instance is required.');
    }
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > MAX_BODY_BYTES + MAX_META_BYTES + 4) return refuse(413, 'payload_too_large', 'Too large.');
    const body = await readAll(req, MAX_BODY_BYTES + MAX_META_BYTES + 4);
    if (!body) return refuse(413, 'payload_too_large', 'Too large.');
    const expected = createHmac('sha256', this.key)
      .update(`req\n${at}\n${nonce}\n${target}\nPOST\n${INTERNAL_PATH}\n${sha256(body)}`)
      .digest('hex');
    if (!sameHex(mac, expected))
      return refuse(401, 'unauthorized', 'A signed request from another instance is required.');
    if (!this.rememberNonce(nonce, at))
      return refuse(401, 'unauthorized', 'This request was already received.');

    const parsed = unframe(body);
    const meta = parsed?.meta as Partial<ForwardMeta> | undefined;
    const hostname = typeof meta?.hostname === 'string' ? this.options.validHostname(meta.hostname) : null;
    if (
      !parsed ||
      !meta ||
      !hostname ||
      typeof meta.method !== 'string' ||
      !/^[A-Z]{1,20}$/.test(meta.method) ||
      typeof meta.path !== 'string' ||
      !meta.path.startsWith('/') ||
      !isPairs(meta.headers) ||
      typeof meta.timeout_ms !== 'number' ||
      (meta.kind !== 'http' && meta.kind !== 'webhook') ||
      parsed.body.length > MAX_BODY_BYTES
    ) {
      return refuse(400, 'bad_request', 'Malformed forwarded request.');
    }
    const answer = (out: AnswerMeta, outBody?: Buffer) => {
      const data = frame(out, outBody);
      res.writeHead(200, {
        'content-type': 'application/octet-stream',
        'content-length': data.length,
        [SIGNATURE_HEADER]: signAnswer(this.key, nonce, data),
      });
      res.end(data);
    };
    const relay = this.options.relay;
    if (!relay.hasConnection(hostname)) {
      return answer({ error: 'not_holder', message: `This instance does not hold ${hostname}.` });
    }
    if (meta.kind === 'http') {
      const refused = relay.refusal(hostname, meta.method, meta.path);
      if (refused) return answer({ error: refused.code, message: refused.message });
    }
    // Through this instance's socket without a promise per request: the waiter writes the answer.
    const refused = relay.dispatch(
      {
        hostname,
        method: meta.method,
        path: meta.path,
        fields: keepForwardable(meta.headers.flat()),
        // A view of the request body read above, which nothing else holds.
        body: parsed.body,
        timeoutMs: Math.max(1, Math.min(meta.timeout_ms, 120_000)),
      },
      new AnswerWaiter(answer, res, this.options.logger),
    );
    if (refused) answer({ error: refused.code, message: refused.message });
  }

  /** False when the nonce was seen within the window (a replay). */
  private rememberNonce(nonce: string, at: number): boolean {
    const now = Date.now();
    if (now - this.lastPruned > 1_000) {
      this.lastPruned = now;
      for (const [n, expires] of this.nonces) if (expires < now) this.nonces.delete(n);
    }
    if (this.nonces.has(nonce)) return false;
    this.nonces.set(nonce, at + 2 * MAX_SKEW_MS);
    return true;
  }

  private track(promise: Promise<unknown>): void {
    const p = promise.catch((error: unknown) =>
      this.options.logger.warn({ err: error }, 'tunnel lease release failed'),
    );
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  /** After the relay closed its connections: waits for the lease releases, stops timers. */
  async close(): Promise<void> {
    clearInterval(this.renewTimer);
    await Promise.all([...this.pending]);
    this.closed = true;
    await this.unlisten?.();
    await (await this.undici)?.close();
  }
}

/** The holder's side of a forwarded request: writes the tunnel's answer (or failure) as the signed answer. */
class AnswerWaiter implements RelayWaiter {
  constructor(
    private readonly write: (out: AnswerMeta, body?: Buffer) => void,
    private readonly res: ServerResponse,
    private readonly logger: FastifyBaseLogger,
  ) {}

  answer(status: number, fields: string[], body: Buffer): void {
    const headers: HeaderPairs = [];
    for (let i = 0; i + 1 < fields.length; i += 2)
      headers.push([fields[i] as string, fields[i + 1] as string]);
    this.send({ status, headers }, body);
  }

  fail(error: TunnelError): void {
    this.send({ error: error.code, message: error.message });
  }

  private send(out: AnswerMeta, body?: Buffer): void {
    try {
      this.write(out, body);
    } catch (error) {
      // Called from the tunnel's message handler: a failed write ends this answer only.
      this.logger.error({ err: error }, 'tunnel relay failed');
      this.res.destroy();
    }
  }
}

interface HolderAnswer {
  status: number;
  /** The answer's signature header (undefined when absent or repeated). */
  signature: string | undefined;
  body: Buffer;
}

/** The most a holder's answer can be: a framed response (meta and body within their bounds). */
const MAX_ANSWER_BYTES = 4 + MAX_META_BYTES + MAX_BODY_BYTES;
const SIGNATURE_HEADER_BYTES = Buffer.from(SIGNATURE_HEADER, 'latin1');

/**
 * The holder's answer to one forwarded request, as undici's dispatch handler: status, signature
 * header and body, which is bounded (an answer over MAX_ANSWER_BYTES fails the request and closes
 * its connection; BoundedCall).
 */
class HolderCall extends BoundedCall {
  private status = 0;
  private signature: string | undefined;

  constructor(private readonly done: (answer: HolderAnswer | Error) => void) {
    super(MAX_ANSWER_BYTES);
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    this.status = statusCode;
    let found: string | undefined;
    let count = 0;
    for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
      const name = rawHeaders[i] as Buffer;
      if (name.length !== SIGNATURE_HEADER_BYTES.length) continue;
      if (name.toString('latin1').toLowerCase() !== SIGNATURE_HEADER) continue;
      count++;
      found = (rawHeaders[i + 1] as Buffer).toString('latin1');
    }
    this.signature = count === 1 ? found : undefined;
    return true;
  }

  protected overLimit(): Error {
    return new TunnelError(
      'tunnel_upstream_error',
      'The instance holding the tunnel sent an answer over the limit.',
    );
  }

  protected finish(body: Buffer): void {
    this.done({ status: this.status, signature: this.signature, body });
  }

  protected fail(error: Error): void {
    this.done(error);
  }
}

function readAll(req: IncomingMessage, limit: number): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.removeAllListeners('data');
        req.resume();
        resolve(null);
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}
