import type { IncomingMessage, ServerResponse } from 'node:http';
import websocket from '@fastify/websocket';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import proxyaddr from 'proxy-addr';
import type { WebSocket } from 'ws';
import { tunnelWebhookUrl } from '../bots/tunnelSetup.ts';
import { ownerOf } from '../owners/auth.ts';
import { BotParams } from '../owners/schemas.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { OWNER_SECURITY } from '../platform/http.ts';
import { present } from '../platform/present.ts';
import { ErrorBody } from '../platform/schemas.ts';
import { trustFunction } from '../platform/trustProxy.ts';
import { tunnelConnected } from '../webhooks/tunnelWait.ts';
import { INTERNAL_PATH, TunnelCluster } from './cluster.ts';
import {
  type HeaderPairs,
  MAX_BODY_BYTES,
  MAX_FRAME_BYTES,
  rawHeader,
  requestFieldsFromRaw,
  SUBPROTOCOLS,
  TUNNEL_CONNECT_PATH,
} from './protocol.ts';
import { type RelayWaiter, TunnelError, TunnelRelay } from './relay.ts';
import {
  ConnectHeaders,
  SwitchingProtocols,
  TunnelForwardBody,
  TunnelSettings,
  TunnelTokenResponse,
} from './schemas.ts';
import {
  authenticateTunnelToken,
  getTunnelSettings,
  revalidateTunnels,
  rotateTunnelToken,
  setTunnelForward,
  type TunnelBot,
} from './service.ts';

const connectAuth = new WeakMap<FastifyRequest, TunnelBot>();

/**
 * The managed-tunnel relay (role `tunnel`): the client's WebSocket endpoint, the interception of
 * every HTTP request addressed to `bot-<id>.{TUNNEL_DOMAIN}`, and the owner's token rotation.
 * Must be registered before other modules so that tunnel traffic never reaches their hooks.
 */
export async function registerTunnelRoutes(app: App, ctx: AppContext): Promise<void> {
  const enabled = ctx.config.roles.has('tunnel');
  // On PostgreSQL every instance serves every tunnel hostname (cluster.ts): the relay of an instance
  // without the `tunnel` role holds no connections but hands requests to the instance that does.
  const shared = ctx.db.kind === 'postgres' && ctx.config.secretKey !== undefined;
  const relay =
    enabled || shared
      ? new TunnelRelay({
          logger: ctx.logger,
          publicUrl: (hostname) => tunnelWebhookUrl(ctx.config.baseUrl, hostname, ''),
          requestTimeoutMs: ctx.config.webhookTimeoutMs,
          revalidate: (connections) => revalidateTunnels(ctx.db, connections),
        })
      : undefined;
  if (relay) ctx.tunnelRelay = relay;
  app.decorate('tunnelRelay', relay);

  const suffix = `.${ctx.config.tunnelDomain}`;
  /** The tunnel hostname a Host value (with or without port) addresses, or null. */
  const tunnelHostname = (hostHeader: string): string | null => {
    let host = hostHeader.toLowerCase();
    if (!host.startsWith('bot-')) return null;
    const colon = host.indexOf(':');
    if (colon >= 0) host = host.slice(0, colon);
    if (host.endsWith('.')) host = host.slice(0, -1);
    if (!host.endsWith(suffix)) return null;
    return /^bot-[a-z0-9-]{1,63}$/.test(host.slice(0, -suffix.length)) ? host : null;
  };

  // --- cluster hook (cluster.ts) ---
  const cluster =
    relay && shared
      ? new TunnelCluster({
          db: ctx.db,
          logger: ctx.logger,
          relay,
          secretKey: present(ctx.config.secretKey, 'SECRET_KEY (required with DATABASE_URL)'),
          leaseMs: ctx.config.tunnelLeaseSeconds * 1000,
          internalUrl: () => ctx.config.internalUrl ?? listeningUrl(app.server.address(), ctx.config.host),
          validHostname: (hostname) => (hostname.includes(':') ? null : tunnelHostname(hostname)),
        })
      : undefined;
  if (cluster) {
    await cluster.start();
    app.addHook('onClose', async () => cluster.close());
  }
  // --- end cluster hook ---

  await app.register(websocket, {
    options: {
      maxPayload: MAX_FRAME_BYTES,
      // Frames are small and numerous: compressing each costs more CPU than it saves (explicit,
      // although it is ws's default).
      perMessageDeflate: false,
      // The binary protocol when the client offers it; none (version 1 frames) otherwise. A
      // client offering only unknown versions was refused with 426 before the upgrade.
      handleProtocols: (offered: Set<string>) => SUBPROTOCOLS.find((p) => offered.has(p)) ?? false,
    },
    // Answer what is in flight and tell every client the service restarts (they reconnect).
    preClose(done) {
      relay?.close();
      const server = app.websocketServer;
      for (const client of server.clients) client.close(1012, 'service is restarting');
      server.close(() => {});
      done();
    },
  });

  // The client address as Fastify determines it for the API (same TRUST_PROXY): the address the
  // trusted proxies appended, never one a client wrote into X-Forwarded-For itself.
  const setting = ctx.config.trustProxy;
  const trust = trustFunction(setting);
  const peerTrusted = (req: IncomingMessage): boolean =>
    setting !== false && trust(req.socket.remoteAddress ?? '', 0);
  /** The Host the client addressed: all that every request needs (address and scheme only a relayed one). */
  const clientHost = (req: IncomingMessage): string =>
    (peerTrusted(req) ? lastValue(req.headers['x-forwarded-host']) : undefined) ??
    rawHeader(req.rawHeaders, 'host') ??
    '';
  const clientInfo = (req: IncomingMessage, host: string): ClientInfo => {
    const forwardedProto = peerTrusted(req) ? lastValue(req.headers['x-forwarded-proto']) : undefined;
    // With no trusted proxy the client is the socket's peer (what proxyaddr answers then, without
    // parsing X-Forwarded-For for every request).
    const peer = req.socket.remoteAddress;
    return {
      host,
      ip: setting === false && peer !== undefined ? peer : proxyaddr(req, trust),
      protocol: forwardedProto ?? ((req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http'),
    };
  };
  const onRelayFailure = (error: unknown, req: IncomingMessage, res: ServerResponse) => {
    ctx.logger.error({ err: error }, 'tunnel relay failed');
    if (!res.headersSent) sendError(req, res, 'internal_error', 'The relay failed.');
    else res.destroy();
  };

  // Tunnel traffic is taken over before Fastify sees it: no routing, no API hooks, no body parsing,
  // and the cost of a relayed request stays small. (Upgrades arrive on 'upgrade', not here.)
  const server = app.server;
  const listeners = server.listeners('request');
  if (listeners.length === 1) {
    const fastifyHandler = listeners[0] as (req: IncomingMessage, res: ServerResponse) => void;
    server.removeAllListeners('request');
    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      const host = clientHost(req);
      const hostname = tunnelHostname(host);
      if (!hostname) {
        if (cluster && req.url === INTERNAL_PATH) {
          cluster.handle(req, res).catch((error) => onRelayFailure(error, req, res));
          return;
        }
        fastifyHandler.call(server, req, res);
        return;
      }
      relayHttp(relay, cluster, hostname, req, res, clientInfo(req, host), onRelayFailure);
    });
  }

  // The same for requests that do reach Fastify (inject() in tests, WebSocket upgrades): this is the
  // first onRequest hook of every module, so tunnel traffic never reaches API hooks or handlers.
  app.addHook('onRequest', (request, reply, done) => {
    const host = clientHost(request.raw);
    const hostname = tunnelHostname(host);
    if (!hostname) {
      if (cluster && request.raw.url === INTERNAL_PATH) {
        reply.hijack();
        cluster
          .handle(request.raw, reply.raw)
          .catch((error) => onRelayFailure(error, request.raw, reply.raw));
        return;
      }
      done();
      return;
    }
    if (request.headers.upgrade) {
      // WebSockets are not relayed; the socket is closed after this answer.
      reply
        .status(501)
        .send(new ApiError('not_implemented', 'WebSockets are not relayed by the tunnel.').toBody());
      return;
    }
    reply.hijack();
    relayHttp(
      relay,
      cluster,
      hostname,
      request.raw,
      reply.raw,
      clientInfo(request.raw, host),
      onRelayFailure,
    );
  });

  const connectSchema = {
    tags: ['tunnel'],
    summary: 'Tunnel client connection (WebSocket upgrade; Authorization: Bearer svc_tun_…)',
    description:
      'The tunnel client (`botpay tunnel`) opens a WebSocket here with its tunnel token in the Authorization header. See docs/tunnels.md for the frames.',
    security: [{ tunnelToken: [] }],
    headers: ConnectHeaders,
    response: {
      101: SwitchingProtocols,
      401: ErrorBody,
      426: ErrorBody,
      503: ErrorBody,
    },
  };
  (app as unknown as FastifyInstance).route({
    method: 'GET',
    url: TUNNEL_CONNECT_PATH,
    schema: connectSchema,
    preValidation: async (request: FastifyRequest, reply: FastifyReply) => {
      if (!relay || !enabled) {
        return reply
          .status(503)
          .send(new ApiError('service_unavailable', 'This instance does not run the tunnel relay.').toBody());
      }
      const offered = request.headers['sec-websocket-protocol'];
      if (typeof offered === 'string') {
        const names = offered.split(',').map((p) => p.trim());
        if (!names.some((p) => SUBPROTOCOLS.includes(p))) {
          return reply
            .status(426)
            .send(
              new ApiError(
                'upgrade_required',
                `This service speaks the tunnel protocols ${SUBPROTOCOLS.join(', ')} (and the original one, offered by naming no subprotocol); the client offered ${names.join(', ').slice(0, 200)}. Use a botpay tunnel client of the service's version.`,
              ).toBody(),
            );
        }
      }
      const header = request.headers.authorization;
      const token = typeof header === 'string' ? /^Bearer\s+(\S+)$/i.exec(header.trim())?.[1] : undefined;
      const bot = token ? await authenticateTunnelToken(ctx.db, token) : null;
      if (!bot) {
        return reply.status(401).send({
          error: 'Authentication required',
          message: 'Send a valid tunnel token in the header Authorization: Bearer svc_tun_….',
        });
      }
      connectAuth.set(request, bot);
    },
    handler: async (_request: FastifyRequest, reply: FastifyReply) =>
      reply
        .status(426)
        .header('upgrade', 'websocket')
        .send(new ApiError('upgrade_required', 'Connect with a WebSocket (botpay tunnel).').toBody()),
    wsHandler: (socket: WebSocket, request: FastifyRequest) => {
      const bot = connectAuth.get(request);
      if (!relay || !enabled || !bot) {
        socket.close(1011, 'not authenticated');
        return;
      }
      relay.attach(socket, bot);
      // Once this connection can be delivered to (its lease written, when instances share tunnels),
      // the deliveries that waited for the bot's first connection become due (tunnelWait.ts).
      const hostname = bot.hostname.toLowerCase();
      void (cluster ? cluster.leaseWritten(hostname) : Promise.resolve())
        .then(() => tunnelConnected(ctx, bot.id))
        .catch((error: unknown) =>
          ctx.logger.warn(
            { err: error, bot_id: bot.id },
            'waking the deliveries that waited for the tunnel failed',
          ),
        );
    },
  });

  app.post(
    '/api/v1/owner/bots/:bot_id/tunnel-token/rotate',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: 'Issue a new tunnel token (shown once); the connected tunnel client is cut off',
        params: BotParams,
        response: {
          200: TunnelTokenResponse,
          401: ErrorBody,
          404: ErrorBody,
          409: ErrorBody,
        },
      },
    },
    async (request) => {
      const { hostname, result } = await rotateTunnelToken(ctx, ownerOf(request).id, request.params.bot_id);
      relay?.disconnect(hostname);
      return result;
    },
  );

  app.get(
    '/api/v1/owner/bots/:bot_id/tunnel',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: "The bot's managed tunnel: webhook URL and what the tunnel forwards",
        params: BotParams,
        response: { 200: TunnelSettings, 401: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request) => getTunnelSettings(ctx, ownerOf(request).id, request.params.bot_id),
  );
  app.patch(
    '/api/v1/owner/bots/:bot_id/tunnel',
    {
      schema: {
        tags: ['owner'],
        security: OWNER_SECURITY,
        summary: 'Choose what the tunnel forwards to the bot (only POST to the webhook path, or everything)',
        params: BotParams,
        body: TunnelForwardBody,
        response: { 200: TunnelSettings, 400: ErrorBody, 401: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
    },
    async (request) => {
      const { hostname, policy, result } = await setTunnelForward(
        ctx,
        ownerOf(request).id,
        request.params.bot_id,
        request.body.forward,
      );
      // At once on this instance; other relay instances pick it up at their next revalidation.
      relay?.setPolicy(hostname, policy);
      return result;
    },
  );
}

interface ClientInfo {
  host: string;
  ip: string;
  protocol: string;
}

/** The value the nearest proxy appended (the last one): earlier ones may come from the client. */
function lastValue(value: string | string[] | undefined): string | undefined {
  const text = Array.isArray(value) ? value[value.length - 1] : value;
  const last = text?.split(',').at(-1)?.trim();
  return last ? last : undefined;
}

/** The address other instances reach this one at when INTERNAL_URL is not set. */
function listeningUrl(address: ReturnType<App['server']['address']>, host: string): string | undefined {
  if (!address || typeof address !== 'object') return undefined;
  const wildcard = host === '0.0.0.0' || host === '::' || host === '';
  const ip = wildcard ? '127.0.0.1' : address.address;
  return `http://${ip.includes(':') ? `[${ip}]` : ip}:${address.port}`;
}

type RelayFailure = (error: unknown, req: IncomingMessage, res: ServerResponse) => void;

/**
 * Relays one HTTP request to the hostname's tunnel: checks, then reads the body (HttpRelay does the
 * rest). No promise on the path through this instance's own tunnel: a busy tunnel relays many
 * thousands a second. Errors that are no TunnelError go to `onFailure`.
 */
function relayHttp(
  relay: TunnelRelay | undefined,
  cluster: TunnelCluster | undefined,
  hostname: string,
  req: IncomingMessage,
  res: ServerResponse,
  client: ClientInfo,
  onFailure: RelayFailure,
): void {
  try {
    // Held here: this relay's socket. Otherwise, with instances sharing tunnels, the holder's
    // (which applies the forwarding policy); else nobody's.
    const local = relay?.hasConnection(hostname) === true;
    if (!relay || (!local && !cluster)) {
      req.resume(); // the body (if any) is not wanted
      sendError(req, res, 'tunnel_not_connected', notConnectedMessage(hostname));
      return;
    }
    const refused = local ? relay.refusal(hostname, req.method ?? 'GET', req.url ?? '/') : undefined;
    if (refused) {
      req.resume();
      sendError(req, res, refused.code, refused.message, false, refused.code === 'method_not_allowed');
      return;
    }
    // From rawHeaders, like the Host: a relayed request never needs Node's req.headers object.
    const declared = Number(rawHeader(req.rawHeaders, 'content-length') ?? 0);
    if (declared > MAX_BODY_BYTES) {
      req.resume();
      sendError(req, res, 'payload_too_large', `The request body exceeds ${MAX_BODY_BYTES} bytes.`, true);
      return;
    }
    // Room for the body among what waits for this tunnel, before reading it (a chunked body may be
    // up to the limit); a tunnel whose client stopped reading gets no more.
    const expected =
      rawHeader(req.rawHeaders, 'transfer-encoding') !== undefined ? MAX_BODY_BYTES : declared || 0;
    const release = local ? relay.reserve(hostname, expected) : undefined;
    if (release instanceof TunnelError) {
      req.resume();
      sendError(req, res, release.code, release.message, true);
      return;
    }
    new HttpRelay(relay, local ? undefined : cluster, hostname, req, res, client, release, onFailure);
  } catch (error) {
    onFailure(error, req, res);
  }
}

/**
 * One relayed HTTP request after the checks: reads its body (at most MAX_BODY_BYTES), sends it
 * through the tunnel (or to the holder instance) and writes the answer to the response. A class
 * rather than closures and promises per request.
 */
class HttpRelay implements RelayWaiter {
  private chunks: Buffer[] = [];
  private size = 0;
  private readonly onData = this.data.bind(this);
  private readonly onEnd = this.end.bind(this);
  private readonly onError = this.error.bind(this);

  constructor(
    private readonly relay: TunnelRelay,
    /** Set when the tunnel is held by another instance. */
    private readonly cluster: TunnelCluster | undefined,
    private readonly hostname: string,
    private readonly req: IncomingMessage,
    private readonly res: ServerResponse,
    private readonly client: ClientInfo,
    /** Gives back the room reserved for the body (relay.reserve), once it has been read. */
    private release: (() => void) | undefined,
    private readonly onFailure: RelayFailure,
  ) {
    req.on('data', this.onData);
    req.on('end', this.onEnd);
    req.on('error', this.onError);
  }

  private data(chunk: Buffer): void {
    this.size += chunk.length;
    if (this.size > MAX_BODY_BYTES) {
      this.stopReading();
      this.req.resume(); // the rest is not wanted
      sendError(
        this.req,
        this.res,
        'payload_too_large',
        `The request body exceeds ${MAX_BODY_BYTES} bytes.`,
        true,
      );
      return;
    }
    this.chunks.push(chunk);
  }

  private end(): void {
    this.stopReading();
    const chunks = this.chunks;
    this.chunks = [];
    const [first] = chunks;
    try {
      this.forward(chunks.length === 1 && first ? first : Buffer.concat(chunks));
    } catch (error) {
      this.onFailure(error, this.req, this.res);
    }
  }

  private error(error: Error): void {
    this.stopReading();
    this.onFailure(error, this.req, this.res);
  }

  private stopReading(): void {
    this.req.off('data', this.onData);
    this.req.off('end', this.onEnd);
    this.req.off('error', this.onError);
    const release = this.release;
    this.release = undefined;
    release?.();
  }

  private forward(body: Buffer): void {
    const { req, client } = this;
    const fields = requestFieldsFromRaw(req.rawHeaders);
    fields.push(
      'X-Forwarded-For',
      client.ip,
      'X-Forwarded-Host',
      client.host,
      'X-Forwarded-Proto',
      client.protocol,
    );
    const method = req.method ?? 'GET';
    const path = req.url ?? '/';
    const timeoutMs = this.relay.requestTimeoutMs;
    if (!this.cluster) {
      const refused = this.relay.dispatch(
        { hostname: this.hostname, method, path, fields, body, timeoutMs },
        this,
      );
      if (refused) this.fail(refused);
      return;
    }
    const headers: HeaderPairs = [];
    for (let i = 0; i + 1 < fields.length; i += 2)
      headers.push([fields[i] as string, fields[i + 1] as string]);
    this.cluster.send({ hostname: this.hostname, method, path, headers, body, timeoutMs, kind: 'http' }).then(
      (response) => this.answer(response.status, response.headers.flat(), response.body),
      (error) => {
        if (error instanceof TunnelError) this.fail(error);
        else this.onFailure(error, this.req, this.res);
      },
    );
  }

  answer(status: number, fields: string[], body: Buffer): void {
    try {
      const head = this.req.method === 'HEAD' || status === 204 || status === 304;
      if (!head) fields.push('content-length', String(body.length));
      this.res.writeHead(status, fields);
      this.res.end(head ? undefined : body);
    } catch (error) {
      this.onFailure(error, this.req, this.res);
    }
  }

  fail(error: TunnelError): void {
    const message =
      error.code === 'tunnel_not_connected' ? notConnectedMessage(this.hostname) : error.message;
    sendError(this.req, this.res, error.code, message, false, error.code === 'method_not_allowed');
  }
}

function notConnectedMessage(hostname: string): string {
  return `The tunnel for ${hostname} is not connected. The bot must run its tunnel client (botpay tunnel …).`;
}

const TITLES: Record<string, string> = {
  tunnel_not_connected: 'Tunnel not connected',
  tunnel_timeout: 'Tunnel timeout',
  tunnel_upstream_error: 'Bad gateway',
  payload_too_large: 'Payload too large',
  not_found: 'Not found',
  method_not_allowed: 'Method not allowed',
  service_unavailable: 'Service unavailable',
  internal_error: 'Internal error',
};

/** A JSON error (or a small HTML page for browsers) written on the raw response. */
function sendError(
  req: IncomingMessage,
  res: ServerResponse,
  code: TunnelError['code'] | 'internal_error',
  message: string,
  closeConnection = false,
  allowPost = false,
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const error = new ApiError(code, message);
  const wantsHtml = /\btext\/html\b/.test(String(req.headers.accept ?? ''));
  const body = wantsHtml
    ? `<!doctype html><html><head><meta charset="utf-8"><title>${error.status} ${TITLES[code]}</title></head><body><h1>${error.status} ${TITLES[code]}</h1><p>${escapeHtml(message)}</p></body></html>\n`
    : JSON.stringify(error.toBody());
  const headers: Record<string, string | number> = {
    'content-type': wantsHtml ? 'text/html; charset=utf-8' : 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
  };
  if (closeConnection) headers.connection = 'close';
  if (allowPost) headers.allow = 'POST';
  if (code === 'service_unavailable') headers['retry-after'] = '1';
  res.writeHead(error.status, headers);
  res.end(req.method === 'HEAD' ? undefined : body);
}

function escapeHtml(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] ?? c,
  );
}

declare module 'fastify' {
  interface FastifyInstance {
    tunnelRelay: TunnelRelay | undefined;
  }
}
