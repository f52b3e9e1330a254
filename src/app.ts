import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import AjvCompiler from '@fastify/ajv-compiler';
import SerializerSelector from '@fastify/fast-json-stringify-compiler';
import swagger from '@fastify/swagger';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, {
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifySchema,
  LogController,
} from 'fastify';
import { registerBotRoutes } from './bots/routes.ts';
import { registerCardRoutes } from './cards/routes.ts';
import { registerCheckoutRoutes } from './checkout/routes.ts';
import { isDevelopmentBaseUrl } from './config.ts';
import { wantsHtml } from './dashboard/http.ts';
import { htmlNotFound, registerDashboardRoutes } from './dashboard/routes.ts';
import { registerMcpRoutes } from './mcp/http.ts';
import { registerSkillRoutes } from './mcp/skill.ts';
import { registerMerchantRoutes } from './merchants/routes.ts';
import { OWNER_MAIL_CLOSE_WAIT_MS, ownerMailSettled } from './notifications/job.ts';
import { registerOwnerRoutes } from './owners/routes.ts';
import { jsonDepthExceeded, MAX_JSON_DEPTH, strictBodySchema } from './platform/bodies.ts';
import type { AppContext } from './platform/context.ts';
import { spendQueueLoad } from './spend/run.ts';
import { constantTimeEqual } from './platform/crypto.ts';
import { migrationsApplied } from './platform/db/migrate.ts';
import { pgErrorCode } from './platform/db/port.ts';
import { logDecision, noteRefusal } from './platform/decisionLog.ts';
import { ApiError, ERROR_STATUS } from './platform/errors.ts';
import type { App } from './platform/http.ts';
import { lazyChildLoggerFactory } from './platform/logger.ts';
import { type LazySchemas, lazySchemas } from './platform/lazySchemas.ts';
import { LoadShedder, trackRequestWork } from './platform/overload.ts';
import { ErrorBody } from './platform/schemas.ts';
import { trustFunction } from './platform/trustProxy.ts';
import { registerTaskRoutes } from './tasks/routes.ts';
import { registerTopupRoutes } from './topups/routes.ts';
import { registerTunnelRoutes } from './tunnels/routes.ts';
import { registerWebhookRoutes } from './webhooks/routes.ts';
import { registerX402Routes } from './x402/routes.ts';

/**
 * The one app factory: validation, error mapping, auth hooks, request ids and every route are
 * wired here, so tests build exactly the app that production runs.
 */
export async function buildApp(ctx: AppContext): Promise<App> {
  // Each route's validators and serializers are compiled on its first request (platform/lazySchemas.ts).
  const schemas = lazySchemas();
  const app = Fastify({
    loggerInstance: ctx.logger,
    childLoggerFactory: lazyChildLoggerFactory,
    // Fastify's two lines per request at the level requestLogLevel says (RequestLogs below).
    logController: new RequestLogs(requestLogLevel(ctx.config)),
    trustProxy: trustFunction(ctx.config.trustProxy),
    bodyLimit: 1_048_576,
    // Slow clients must not hold connections forever.
    requestTimeout: 30_000,
    connectionTimeout: 30_000,
    keepAliveTimeout: 72_000,
    routerOptions: { maxParamLength: 200 },
    // Errors raised before routing (an over-long path parameter, a malformed escape) and those
    // Node's HTTP parser raises (oversized or unparsable request) use the one error envelope too.
    frameworkErrors: (error, request, reply) => {
      const code = error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'uri_too_long' : 'validation_error';
      const message =
        code === 'uri_too_long'
          ? 'A path segment is longer than any identifier of this API.'
          : 'The request path is malformed.';
      reply.header('x-request-id', request.id);
      return (reply as unknown as FastifyReply).status(ERROR_STATUS[code]).send({ error: code, message });
    },
    clientErrorHandler,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,64}$/.test(given) ? given : randomUUID();
    },
    ajv: {
      customOptions: {
        // A string is not a number: wrongly typed input is rejected, never coerced.
        coerceTypes: false,
        allErrors: false,
        removeAdditional: false,
      },
    },
    // Except in query strings, where every value arrives as text: `?limit=5` is the integer its
    // schema declares and `?refresh=true` the boolean (what generated clients send).
    schemaController: {
      compilersFactory: {
        buildValidator: schemas.validators(queryCoercingValidator()),
        buildSerializer: schemas.serializers(SerializerSelector()),
      },
    },
  }).withTypeProvider<TypeBoxTypeProvider>() as unknown as App;

  // Load shedding (platform/overload.ts). The event loop's delay is measured from the moment the
  // server listens: building the app (compiling every route's validators and serializers) holds
  // the loop for a second or more, which would read as two late seconds and shed the first
  // requests of every new instance.
  const shedder = new LoadShedder(ctx.db, ctx.config, ctx.metrics.eventLoop, () => spendQueueLoad(ctx.db));
  app.addHook('onListen', (done) => {
    ctx.metrics.eventLoop.start();
    done();
  });
  app.addHook('onClose', (_instance, done) => {
    ctx.metrics.eventLoop.stop();
    done();
  });

  // Every route, as registered (routeTable below), and every JSON body closed to fields its schema
  // does not name (platform/bodies.ts). The dashboard's forms take no JSON: its scope parses
  // url-encoded forms only.
  const routes: RouteEntry[] = [];
  ROUTE_TABLES.set(app, routes);
  LAZY_SCHEMAS.set(app, schemas);
  app.addHook('onRoute', function (this: FastifyInstance, route) {
    const schema = route.schema as (FastifySchema & { tags?: string[] }) | undefined;
    const json = this.hasContentTypeParser('application/json');
    if (schema?.body !== undefined && json) {
      route.schema = { ...schema, body: strictBodySchema(schema.body) };
    }
    const dashboard = schema?.tags?.includes('dashboard') === true;
    for (const method of [route.method].flat()) {
      routes.push({ method, url: route.url, schema: route.schema, json, dashboard });
    }
  });
  // JSON nested deeper than MAX_JSON_DEPTH is refused on its text, before it is parsed.
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (jsonDepthExceeded(String(body))) {
      done(
        new ApiError(
          'validation_error',
          `The body nests objects and arrays deeper than ${MAX_JSON_DEPTH} levels, more than any request of this API.`,
          { max_depth: MAX_JSON_DEPTH },
        ),
        undefined,
      );
      return;
    }
    parseJson(request, String(body), done);
  });

  // A request's owner mail may still be on its way to SMTP (sent after the answer): the database
  // the send writes its result to stays open until it ends, for a few seconds at most.
  app.addHook('onClose', () => ownerMailSettled(ctx, OWNER_MAIL_CLOSE_WAIT_MS));

  // Hooks run on every request: callback style, not async (no promise per hook per request).
  // First, each request's database work is marked as its own: its first session is its admission
  // and an `overloaded` refusal comes only then, before anything changed (platform/db/gate.ts).
  trackRequestWork(app);
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    done();
  });
  // No field stores a NUL: refused before validation and before any handler could strip it (names
  // are cleaned of control characters, which would otherwise turn "a\u0000b" into a stored "ab").
  app.addHook('preValidation', (request, _reply, done) => {
    const where =
      nulPath(request.body, 'body') ?? nulPath(request.query, 'query') ?? nulPath(request.params, 'params');
    if (!where) return done();
    done(
      new ApiError(
        'validation_error',
        `${where} contains a NUL character (\\u0000), which no field accepts.`,
        {
          field: where.replace(/^(body|query|params)\.?/, ''),
        },
      ),
    );
  });
  app.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? 'unmatched';
    ctx.metrics.httpDuration.observe(request.method, route, reply.statusCode, reply.elapsedTime / 1000);
    // At debug: what the request decided (platform/decisionLog.ts).
    logDecision(request, reply);
    done();
  });

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof ApiError) {
      noteRefusal(request, error.code, error.details);
      // Every 429 and every `overloaded` 503 says when to come back in the header too (RFC 9110),
      // not only in the body.
      if (
        (error.code === 'rate_limited' || error.code === 'overloaded') &&
        error.details.retry_after_seconds !== undefined
      ) {
        reply.header('retry-after', String(error.details.retry_after_seconds));
      }
      return reply.status(error.status).send(error.toBody());
    }
    if (error.validation) {
      const first = error.validation[0];
      const where = `${error.validationContext ?? 'request'}${first?.instancePath ?? ''}`;
      // A field the route does not know: named, in the path of the object that holds it.
      const unknown =
        first?.keyword === 'additionalProperties'
          ? String((first.params as { additionalProperty?: unknown }).additionalProperty)
          : undefined;
      const path = `${first?.instancePath ?? ''}${unknown === undefined ? '' : `/${unknown}`}`;
      const field = path ? path.replace(/^\//, '').replace(/\//g, '.') : undefined;
      const message =
        unknown === undefined
          ? `${where} ${first?.message ?? 'is invalid'}`
          : `${where} has a field this request does not take: ${JSON.stringify(unknown.slice(0, 100))}`;
      noteRefusal(request, 'validation_error', field ? { field } : {});
      return reply.status(400).send({ error: 'validation_error', message, ...(field ? { field } : {}) });
    }
    switch (error.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return reply
          .status(413)
          .send({ error: 'payload_too_large', message: 'The request body is too large.' });
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return reply
          .status(415)
          .send({ error: 'unsupported_media_type', message: 'Send the body as application/json.' });
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      case 'FST_ERR_CTP_INVALID_JSON_BODY':
        return reply.status(400).send({ error: 'validation_error', message: 'The body is not valid JSON.' });
    }
    if (typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 500) {
      const message = error.statusCode === 400 ? 'The request is malformed.' : error.message;
      return reply.status(error.statusCode).send({ error: 'validation_error', message });
    }
    const code = pgErrorCode(error);
    // A NUL character (or other text PostgreSQL cannot store) in any string: the statement failed
    // and its transaction rolled back, so nothing changed. The client's input, not our fault.
    if (code === '22021' || code === '22P05') {
      return reply.status(400).send({
        error: 'validation_error',
        message: 'The request contains a character that cannot be stored (such as NUL, \\u0000).',
      });
    }
    // PostgreSQL refused a new connection because it has as many as it allows: the database answers,
    // it is full. Past capacity, not down.
    if (code === '53300') {
      const overloaded = shedder.refuse('database_wait');
      ctx.metrics.requestsShed.inc({ reason: 'database_wait' });
      reply.header('retry-after', String(overloaded.details.retry_after_seconds));
      return reply.status(overloaded.status).send(overloaded.toBody());
    }
    if (isDatabaseUnavailable(error, code)) {
      request.log.warn({ err: error }, 'database unavailable');
      return reply.status(503).header('retry-after', '5').send({
        error: 'service_unavailable',
        message: 'The service is temporarily unavailable; retry shortly.',
      });
    }
    request.log.error({ err: error }, 'unhandled error');
    return reply
      .status(500)
      .send({ error: 'internal_error', message: `Something went wrong (request ${request.id}).` });
  });

  app.setNotFoundHandler((request, reply) => {
    // People in a browser get the friendly page; API clients the JSON error.
    if (wantsHtml(request)) return htmlNotFound(ctx, request, reply);
    reply
      .status(404)
      .send({ error: 'not_found', message: `No route ${request.method} ${request.url.split('?')[0]}.` });
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Bot Payment Service',
        version: '1.0.0',
        license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
        description:
          'Bot-facing API (/api/v1/bot, registration) and owner API (/api/v1/owner); guides in the docs/ folder of the repository.',
      },
      servers: [{ url: ctx.config.baseUrl }],
      components: {
        securitySchemes: {
          botKey: { type: 'http', scheme: 'bearer', description: 'svc_live_<48 hex>' },
          ownerToken: { type: 'http', scheme: 'bearer', description: 'svc_owner_<48 hex>' },
          tunnelToken: { type: 'http', scheme: 'bearer', description: 'svc_tun_<48 hex>' },
        },
      },
    },
    transform: openapiTransform,
  });
  // Swagger UI at /docs, made on its first request (docsUi below): a start neither loads it nor
  // reads its files.
  const docs = docsUi(app);
  app.get('/docs', { schema: { hide: true } }, docs);
  app.get('/docs/*', { schema: { hide: true } }, docs);
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  app.get('/metrics', { schema: { hide: true } }, async (request, reply) => {
    const token = ctx.config.metricsToken;
    if (token !== undefined) {
      const given = /^bearer (.+)$/i.exec(request.headers.authorization ?? '')?.[1]?.trim() ?? '';
      if (!constantTimeEqual(given, token)) {
        return reply
          .status(401)
          .header('www-authenticate', 'Bearer')
          .send({ error: 'Authentication required' });
      }
    }
    reply.header('content-type', ctx.metrics.registry.contentType);
    return ctx.metrics.registry.metrics();
  });
  app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  // Readiness is about the database and the schema; the instance's own load is reported beside
  // them and never makes it unready: every instance of a deployment is busy at the same peak, and
  // a load balancer that took them all out would turn a burst into an outage. A busy instance sheds
  // (`503 overloaded` with Retry-After) and recovers by itself.
  let migrationsKnown = await migrationsApplied(ctx.db).catch(() => false);
  app.get('/readyz', { schema: { hide: true } }, async (_request, reply) => {
    const load = shedder.report();
    try {
      await ctx.db.ping();
    } catch {
      return reply
        .status(503)
        .send({ status: 'not_ready', reason: 'database unreachable', database: 'unreachable', load });
    }
    // The schema check takes a database session: while none is free, the last answer stands
    // rather than the probe joining the line (or being refused in it).
    const sessions = load.database_sessions;
    if (sessions.waiting === 0 && sessions.in_use < sessions.size) {
      migrationsKnown = await migrationsApplied(ctx.db).catch(() => migrationsKnown);
    }
    if (!migrationsKnown) {
      return reply
        .status(503)
        .send({ status: 'not_ready', reason: 'migrations not applied', database: 'reachable', load });
    }
    return { status: 'ready', database: 'reachable', load };
  });

  // First: requests for bot-<id>.{TUNNEL_DOMAIN} are relayed before any other module's hooks.
  await registerTunnelRoutes(app, ctx);
  // Then, before any module's work (authentication, body parsing, handlers): past capacity a new
  // request is refused at once (platform/overload.ts). Probes and metrics are always answered.
  app.addHook('onRequest', (request, _reply, done) => {
    if (NEVER_SHED.has(request.routeOptions.url ?? '')) return done();
    const reason = shedder.reason();
    if (reason === undefined) return done();
    ctx.metrics.requestsShed.inc({ reason });
    done(shedder.refuse(reason));
  });
  await registerBotRoutes(app, ctx);
  await registerOwnerRoutes(app, ctx);
  await registerDashboardRoutes(app, ctx);
  await registerWebhookRoutes(app, ctx);
  await registerCardRoutes(app, ctx);
  await registerCheckoutRoutes(app, ctx);
  await registerTaskRoutes(app, ctx);
  await registerTopupRoutes(app, ctx);
  await registerMerchantRoutes(app, ctx);
  await registerX402Routes(app, ctx);
  await registerSkillRoutes(app, ctx);
  await registerMcpRoutes(app, ctx);
  return app;
}

/**
 * The handler of /docs and /docs/*: @fastify/swagger-ui (its pages, scripts and styles, ~2 MB of
 * files) in a Fastify instance of its own, made on the first request and fed this app's OpenAPI
 * document, which answers each request as the plugin would have in the app itself.
 */
function docsUi(app: App) {
  let ui: Promise<FastifyInstance> | undefined;
  const open = async () => {
    const { default: swaggerUi } = await import('@fastify/swagger-ui');
    const instance = Fastify();
    // `swagger()` here is the app's document.
    instance.decorate('swagger', ((options?: { yaml?: boolean }) =>
      options?.yaml ? app.swagger({ yaml: true }) : app.swagger()) as App['swagger']);
    // Called as a function inside a plugin of ours rather than registered: registering checks that
    // @fastify/swagger was registered in the same instance, which it is not (it is in the app).
    await instance.register(
      (scope) =>
        new Promise<void>((resolve, reject) => {
          const done = (error?: Error) => (error ? reject(error) : resolve());
          const returned: unknown = swaggerUi(scope, { routePrefix: '/docs' }, done);
          if (returned instanceof Promise) returned.then(() => resolve(), reject);
        }),
    );
    await instance.ready();
    return instance;
  };
  return async (request: FastifyRequest, reply: FastifyReply) => {
    ui ??= open().catch((error: unknown) => {
      ui = undefined; // a failure is not remembered: the next request tries again
      throw error;
    });
    const res = await (await ui).inject({
      method: request.method === 'HEAD' ? 'HEAD' : 'GET',
      url: request.url,
      headers: request.headers,
    });
    for (const [name, value] of Object.entries(res.headers)) {
      if (value !== undefined && !HOP_BY_HOP.has(name)) reply.header(name, value);
    }
    return reply.status(res.statusCode).send(res.rawPayload);
  };
}

/** Paths answered however busy the instance is: liveness, readiness and metrics. */
const NEVER_SHED = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * Fastify's validator factory (@fastify/ajv-compiler, as Fastify uses it) twice: the app's Ajv
 * options for bodies, params and headers, and the same with `coerceTypes: true` for query strings.
 */
function queryCoercingValidator(): AjvCompiler.BuildCompilerFromPool {
  const strict = AjvCompiler();
  const coercing = AjvCompiler();
  type Options = NonNullable<Parameters<typeof strict>[1]>;
  // Typed as Fastify declares it; at run time the compiled function is called with the route
  // ({ schema, method, url, httpPart }), as @fastify/ajv-compiler's own is.
  return ((externalSchemas: Parameters<typeof strict>[0], options?: Options) => {
    const base = options ?? {};
    const exact = strict(externalSchemas, base) as unknown as (route: RouteSchema) => unknown;
    const query = coercing(externalSchemas, {
      ...base,
      customOptions: { ...(base.customOptions as Record<string, unknown>), coerceTypes: true },
    } as Options) as unknown as (route: RouteSchema) => unknown;
    return (route: RouteSchema) => (route.httpPart === 'querystring' ? query(route) : exact(route));
  }) as unknown as AjvCompiler.BuildCompilerFromPool;
}

interface RouteSchema {
  schema: unknown;
  method: string;
  url: string;
  httpPart?: string;
}

/** One registered route (a route with several methods appears once per method). */
export interface RouteEntry {
  method: string;
  url: string;
  schema: FastifySchema | undefined;
  /** Its scope parses JSON bodies (false for the dashboard's pages and forms). */
  json: boolean;
  /** A dashboard page, form or asset (tag `dashboard`): not in /openapi.json. */
  dashboard: boolean;
}

const ROUTE_TABLES = new WeakMap<App, RouteEntry[]>();
const LAZY_SCHEMAS = new WeakMap<App, LazySchemas>();

/**
 * Compiles every route schema of an app built by buildApp that no request has compiled yet (they
 * are compiled on first use); returns how many. Tests call it to prove every schema compiles.
 */
export function compileAllSchemas(app: App): number {
  const schemas = LAZY_SCHEMAS.get(app);
  if (!schemas) throw new Error('not an app built by buildApp');
  return schemas.compileAll();
}

/** Every route of an app built by buildApp, in registration order (tests enumerate it). */
export function routeTable(app: App): readonly RouteEntry[] {
  return ROUTE_TABLES.get(app) ?? [];
}

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'date']);

/**
 * The OpenAPI document as `redocly lint` (recommended rules, .ci/run) wants it, for every route
 * without each route repeating it: an operationId from method and path, and the error answers
 * every API route gives whether it declares them or not (400 when it validates input, 401 when it
 * needs credentials). Dashboard pages (tag `dashboard`: HTML pages, forms, assets, the one-click
 * e-mail links) are left out: the document describes the API that clients are generated for.
 */
function openapiTransform({
  schema,
  url,
  route,
}: {
  schema: unknown;
  url: string;
  route: { method: string | string[] };
}) {
  const s = { ...((schema ?? {}) as Record<string, unknown>) };
  // The document describes the API only: the dashboard's HTML pages, forms and assets are not
  // something a client is generated for (they stay in the route table, `routeTable(app)`).
  if ((s.tags as string[] | undefined)?.includes('dashboard')) return { schema: { ...s, hide: true }, url };
  if (s.operationId === undefined && typeof route.method === 'string') {
    const words = url
      .replace(/^\/api\/v1\//, '/')
      .split(/[/_.-]+/)
      .filter(Boolean)
      .map((w) => (w.startsWith(':') ? `by_${w.slice(1)}` : w))
      .flatMap((w) => w.split('_'));
    s.operationId = [
      route.method.toLowerCase(),
      ...words.map((w) => w.charAt(0).toUpperCase() + w.slice(1)),
    ].join('');
  }
  const response = { ...((s.response ?? {}) as Record<string, unknown>) };
  const has4xx = Object.keys(response).some((code) => /^4/.test(code));
  const validates = s.body !== undefined || s.querystring !== undefined || s.params !== undefined;
  if (!has4xx && validates) response[400] = ErrorBody;
  const secured = Array.isArray(s.security) && s.security.length > 0;
  if (secured && response[401] === undefined) response[401] = ErrorBody;
  s.response = response;
  return { schema: s, url };
}

/** Where (body.a.0.b) a string or key holding U+0000 is, or undefined; bounded depth. */
function nulPath(value: unknown, at: string, depth = 0): string | undefined {
  if (typeof value === 'string') return value.includes('\u0000') ? at : undefined;
  if (value === null || typeof value !== 'object' || depth > 32 || ArrayBuffer.isView(value))
    return undefined;
  for (const [key, item] of Object.entries(value)) {
    const path = at ? `${at}.${key}` : key;
    if (key.includes('\u0000')) return at;
    const found = nulPath(item, path, depth + 1);
    if (found) return found;
  }
  return undefined;
}

/**
 * What Node's HTTP parser refuses before a request exists (Fastify's default answers
 * {"error":"Bad Request","statusCode":400}): the one envelope, written on the socket, then closed.
 */
function clientErrorHandler(error: NodeJS.ErrnoException, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [code, message] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? (['request_timeout', 'The request did not arrive in time.'] as const)
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? (['headers_too_large', 'The request line and headers exceed 16 KB.'] as const)
        : (['validation_error', 'The request is malformed.'] as const);
  const status = ERROR_STATUS[code];
  const body = JSON.stringify({ error: code, message });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(error);
}

function isDatabaseUnavailable(error: unknown, code: string | undefined): boolean {
  if (code && /^(08|57P)/.test(code)) return true;
  const message = error instanceof Error ? error.message : '';
  return (
    code === 'ECONNREFUSED' ||
    code === 'ECONNRESET' ||
    /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(
      message,
    )
  );
}

/**
 * Fastify's two lines per request ('incoming request', 'request completed') at a level of our
 * choosing: info in production, debug in development (BASE_URL on localhost), where they buried the
 * dashboard's address and the sign-in links a newcomer looks for (issue 35, item 4). A request
 * that errored is still logged at error.
 */
class RequestLogs extends LogController {
  constructor(private readonly level: 'debug' | 'info') {
    super();
  }

  override incomingRequest(request: FastifyRequest): void {
    request.log[this.level]({ req: request }, 'incoming request');
  }

  override requestCompleted(
    error: Error | null | undefined,
    request: FastifyRequest,
    reply: FastifyReply,
  ): void {
    if (error) super.requestCompleted(error, request, reply);
    else reply.log[this.level]({ res: reply, responseTime: reply.elapsedTime }, 'request completed');
  }
}

/** The level of the per-request log lines: debug in development (BASE_URL on localhost), else info. */
export function requestLogLevel(config: AppContext['config']): 'debug' | 'info' {
  return isDevelopmentBaseUrl(config) ? 'debug' : 'info';
}
