import type { FastifyBaseLogger } from 'fastify';
import {
  type Bindings,
  type ChildLoggerOptions,
  type DestinationStream,
  type Logger,
  pino,
  stdSerializers,
} from 'pino';

// Every secret the service handles, wherever it could appear in a log object. Request bodies are
// never logged by default; these paths guard against code that logs them on purpose.
const SECRET_FIELDS = [
  'api_key',
  'apiKey',
  'claim_token',
  'claimToken',
  'webhook_secret',
  'webhookSecret',
  'tunnel_token',
  'tunnelToken',
  'primary_hooks_token',
  'hooksToken',
  'pairing_code',
  'pairingCode',
  'token',
  'password',
  'secret',
  'secret_key',
  'missing_digits',
  'missingDigits',
  'owner_token',
  'private_key',
  'privateKey',
  'key_enc',
  'payment_header',
  'signature',
];

export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-csrf-token"]',
  'res.headers["set-cookie"]',
  'headers.authorization',
  'headers.cookie',
  ...SECRET_FIELDS,
  // One level of wildcard only: pino applies these paths to every per-request child logger, and
  // intermediate wildcards (*.*.x) cost about 7% of a cached status request.
  ...SECRET_FIELDS.map((f) => `*.${f}`),
];

const SECRET_QUERY = /^(token|claim_token|code|key|api_key|secret|t|sig)$/i;

/** The URL with the values of secret-looking query parameters replaced (claim links carry tokens). */
export function redactUrl(url: string): string {
  const q = url.indexOf('?');
  if (q < 0) return url;
  const params = new URLSearchParams(url.slice(q + 1));
  for (const key of [...params.keys()]) if (SECRET_QUERY.test(key)) params.set(key, '[Redacted]');
  return `${url.slice(0, q)}?${params.toString()}`;
}

/** The service's one logger (pino), with every secret redacted; Fastify uses it for request logs. */
export function createLogger(level: string, stream?: NodeJS.WritableStream): FastifyBaseLogger {
  const options = {
    level,
    redact: { paths: REDACT_PATHS, censor: '[Redacted]' },
    serializers: {
      // Database errors carry the statement's parameters (PGlite attaches them) and PostgreSQL's
      // detail and context quote row and parameter values: key and token hashes, encrypted secrets.
      // The SQL text, code and message stay; the values never reach the log.
      err(error: Error) {
        const out = stdSerializers.err(error) as unknown as Record<string, unknown>;
        for (const key of ['params', 'parameters', 'queryOptions', 'detail', 'where', 'internalQuery'])
          delete out[key];
        return out;
      },
      req(req: { method: string; url: string; id: string; ip?: string; headers?: Record<string, unknown> }) {
        return {
          id: req.id,
          method: req.method,
          url: redactUrl(req.url),
          host: req.headers?.host,
          ip: req.ip,
        };
      },
    },
  };
  return (stream ? pino(options, stream as DestinationStream) : pino(options)) as FastifyBaseLogger;
}

/**
 * Fastify's per-request logger (request.log) without a per-request cost: pino's child() runs the
 * redaction over the request-id binding on every request, about 3% of a cached status request,
 * for a logger most requests never write to. This one makes the pino child on the first line
 * written at an enabled level; lines below the level cost a level check. (A class, not closures:
 * one small object per request.)
 */
class LazyChildLogger {
  #real: Logger | undefined;
  constructor(
    readonly parent: Logger,
    readonly childBindings: Bindings,
    readonly childOptions: ChildLoggerOptions,
  ) {}
  get real(): Logger {
    this.#real ??= this.parent.child(this.childBindings, this.childOptions);
    return this.#real;
  }
  get level(): string {
    return (this.#real ?? this.parent).level;
  }
  set level(value: string) {
    this.real.level = value;
  }
  #write(level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace', args: unknown[]): void {
    if (this.#real || this.parent.isLevelEnabled(level))
      (this.real[level] as (...a: unknown[]) => void)(...args);
  }
  fatal(...args: unknown[]): void {
    this.#write('fatal', args);
  }
  error(...args: unknown[]): void {
    this.#write('error', args);
  }
  warn(...args: unknown[]): void {
    this.#write('warn', args);
  }
  info(...args: unknown[]): void {
    this.#write('info', args);
  }
  debug(...args: unknown[]): void {
    this.#write('debug', args);
  }
  trace(...args: unknown[]): void {
    this.#write('trace', args);
  }
  silent(): void {}
  child(bindings: Bindings, options?: ChildLoggerOptions): Logger {
    return this.real.child(bindings, options);
  }
}

export function lazyChildLoggerFactory(
  logger: FastifyBaseLogger,
  bindings: Bindings,
  options: ChildLoggerOptions,
): FastifyBaseLogger {
  return new LazyChildLogger(logger as unknown as Logger, bindings, options) as unknown as FastifyBaseLogger;
}
