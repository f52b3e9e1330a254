import { isIP } from 'node:net';
import proxyaddr from 'proxy-addr';
// One configuration schema, parsed once at start-up. Every variable of the README table is here with
// its default; a wrong value stops start-up with a message that names the variable.

export const ALL_ROLES = ['api', 'worker', 'scheduler', 'tunnel'] as const;
export type Role = (typeof ALL_ROLES)[number];

export interface Config {
  port: number;
  host: string;
  baseUrl: string;
  /** Where the service's own shops (/merchant/<slug>) are reached from outside; decoy tasks link there. */
  decoyShopBaseUrl: string;
  dataDir: string;
  databaseUrl: string | undefined;
  /** Connections each instance's PostgreSQL pool may open (DATABASE_POOL_SIZE), plus one for LISTEN. */
  databasePoolSize: number;
  /**
   * How long a statement may wait for a database session (a pool connection; with the embedded
   * database, a place in its thread's queue) before the request is answered `503 overloaded`
   * (DATABASE_POOL_WAIT_MS). New requests are shed as soon as the first in line has waited half of it.
   */
  databasePoolWaitMs: number;
  /**
   * Group commit of purchases that run on their own (src/spend/batch.ts), PostgreSQL only: at most
   * `concurrency` purchase calls of this instance in flight (SPEND_CONCURRENCY); purchases arriving
   * while all are busy wait and share the next call's transaction, up to `size` (SPEND_BATCH_SIZE;
   * 1 turns batching off); a purchase waits for a call at most DATABASE_POOL_WAIT_MS.
   */
  spendBatch: { size: number; concurrency: number; maxWaitMs: number };
  /**
   * New requests are answered `503 overloaded` while the event loop's delay (a mean weighted by
   * time, platform/overload.ts) has been at least this in each of the last two seconds
   * (SHED_EVENT_LOOP_DELAY_MS; 0 turns it off).
   */
  shedEventLoopDelayMs: number;
  tunnelDomain: string;
  /**
   * Where the other instances reach this one to hand it a request for a tunnel it holds
   * (INTERNAL_URL); undefined: http://127.0.0.1:<the port it listens on> (instances on one host).
   */
  internalUrl: string | undefined;
  /** How long a tunnel lease lasts without renewal (renewed every third of it). */
  tunnelLeaseSeconds: number;
  /** Raw SECRET_KEY text; undefined only for the embedded database before it is loaded from DATA_DIR. */
  secretKey: string | undefined;
  smtpUrl: string | undefined;
  /** Bearer token required by GET /metrics when set (otherwise /metrics is open: keep it off the internet). */
  metricsToken: string | undefined;
  mailFrom: string;
  /**
   * Which proxies may say who the client is (X-Forwarded-For): false (none), a hop count (`true` is
   * one hop: the address the proxy in front appended), or the proxies' addresses and CIDRs.
   */
  trustProxy: false | number | string[];
  roles: ReadonlySet<Role>;
  registrationRateLimitPerHour: number;
  /**
   * The registration limit for clients on this machine's loopback address: the same as
   * registrationRateLimitPerHour, except in development (BASE_URL on localhost) with
   * REGISTRATION_RATE_LIMIT_PER_HOUR unset, where trying the README and the docs needs more than 3.
   */
  registrationRateLimitLoopbackPerHour: number;
  checkoutRateLimitPerHour: number;
  /** Top-up requests a bot may make in a rolling day, and how many may wait for the owner at once. */
  topupRequestsPerDay: number;
  topupRequestsOpenMax: number;
  approvalWindowSeconds: number;
  webhookTimeoutMs: number;
  webhookRetryDelaysSeconds: readonly number[];
  /** After a webhook secret rotation, how long the previous secret still signs deliveries too. */
  webhookSecretOverlapSeconds: number;
  allowPrivateWebhookTargets: boolean;
  /**
   * Days a finished webhook delivery (delivered, failed or acknowledged), its attempts and its
   * event are kept (src/jobs/retention.ts; docs/deploy.md, Data retention).
   */
  deliveryLogRetentionDays: number;
  /** Days owner audit log rows are kept. */
  auditLogRetentionDays: number;
  logLevel: string;
  /**
   * How long an instance may serve a bot's status from memory (0 disables). Changes invalidate
   * the copy at once through LISTEN/NOTIFY; this bounds staleness if a notification is lost.
   */
  statusCacheMs: number;
  /** The partner_wallet rail (x402 USDC payments, docs/x402.md); undefined: the rail cannot be turned on. */
  x402: X402Config | undefined;
}

export interface X402Config {
  /** CAIP-2 network id as x402 v2 writes it, e.g. `eip155:8453`. */
  network: `eip155:${number}`;
  chainId: number;
  rpcUrl: string;
  /** The USDC (EIP-3009) contract, checksummed. */
  usdcAddress: string;
  /** Longest validity of a signed authorisation, whatever the resource server asks. */
  maxValiditySeconds: number;
  /** How often the reconciliation job reads the chain. */
  reconcileSeconds: number;
}

/** Known networks: chain id, USDC contract and a public RPC endpoint (X402_RPC_URL overrides it). */
const X402_NETWORKS: Record<string, { chainId: number; usdc: string; rpc: string }> = {
  base: {
    chainId: 8453,
    usdc: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    rpc: 'https://mainnet.base.org',
  },
  'base-sepolia': {
    chainId: 84532,
    usdc: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    rpc: 'https://sepolia.base.org',
  },
};

/** X402_NETWORK (`base`, `base-sepolia` or `eip155:<chain id>`), X402_RPC_URL, X402_USDC_ADDRESS. */
function x402Setting(env: Env): X402Config | undefined {
  const raw = read(env, 'X402_NETWORK')?.toLowerCase();
  if (raw === undefined || raw === 'off') return undefined;
  const known = X402_NETWORKS[raw];
  const custom = /^eip155:([1-9]\d{0,15})$/.exec(raw);
  const chainId = known ? known.chainId : custom?.[1] !== undefined ? Number(custom[1]) : undefined;
  if (chainId === undefined) {
    throw new ConfigError('X402_NETWORK', `must be base, base-sepolia or eip155:<chain id>, got "${raw}"`);
  }
  const rpcRaw = read(env, 'X402_RPC_URL') ?? known?.rpc;
  if (rpcRaw === undefined) throw new ConfigError('X402_RPC_URL', `is required for X402_NETWORK=${raw}`);
  const usdc = read(env, 'X402_USDC_ADDRESS') ?? known?.usdc;
  if (usdc === undefined) throw new ConfigError('X402_USDC_ADDRESS', `is required for X402_NETWORK=${raw}`);
  if (!/^0x[0-9a-fA-F]{40}$/.test(usdc)) {
    throw new ConfigError('X402_USDC_ADDRESS', `must be a 0x-prefixed 20-byte hex address, got "${usdc}"`);
  }
  return {
    network: `eip155:${chainId}`,
    chainId,
    rpcUrl: url('X402_RPC_URL', rpcRaw, ['http:', 'https:']),
    usdcAddress: usdc,
    maxValiditySeconds: integer(env, 'X402_MAX_VALIDITY_SECONDS', 120, 10, 3600),
    reconcileSeconds: integer(env, 'X402_RECONCILE_SECONDS', 30, 1, 3600),
  };
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    problem: string,
  ) {
    super(`Invalid configuration: ${variable} ${problem}`);
    this.name = 'ConfigError';
  }
}

type Env = Readonly<Record<string, string | undefined>>;

function read(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max)
    throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function boolean(env: Env, name: string, fallback: boolean): boolean {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new ConfigError(name, `must be true or false, got "${raw}"`);
}

/** TRUST_PROXY: false, true (one hop), a hop count, or comma-separated proxy addresses/CIDRs. */
function trustProxySetting(raw: string | undefined): false | number | string[] {
  if (raw === undefined || /^(0|false|no|off)$/i.test(raw)) return false;
  if (/^(true|yes|on)$/i.test(raw)) return 1;
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw);
    if (hops > 10) throw new ConfigError('TRUST_PROXY', `a hop count must be at most 10, got ${raw}`);
    return hops;
  }
  const list = raw
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  try {
    proxyaddr.compile(list);
  } catch (error) {
    throw new ConfigError(
      'TRUST_PROXY',
      `must be true, false, a hop count or proxy addresses/CIDRs (${error instanceof Error ? error.message : error})`,
    );
  }
  return list;
}

function url(name: string, raw: string, protocols: readonly string[]): string {
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(name, `must be an absolute URL, got "${raw}"`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must use ${protocols.join(' or ')}, got "${parsed.protocol}"`);
  }
  return raw;
}

export function parseConfig(env: Env = process.env): Config {
  const port = integer(env, 'PORT', 8080, 0, 65535);
  const host = read(env, 'HOST') ?? '0.0.0.0';
  // Digits and dots that are not an IPv4 address (256.1.1.1) are a typo, not a host name to look up.
  if (/^[\d.]+$/.test(host) && isIP(host) !== 4) {
    throw new ConfigError(
      'HOST',
      `is ${host}, which is not an IPv4 address (four numbers 0–255): e.g. 0.0.0.0 or 127.0.0.1.`,
    );
  }
  const baseUrl = url('BASE_URL', read(env, 'BASE_URL') ?? `http://localhost:${port}`, [
    'http:',
    'https:',
  ]).replace(/\/+$/, '');
  const decoyShopRaw = read(env, 'DECOY_SHOP_BASE_URL');
  // `{shop}` stands for each shop's slug (a host per shop); the rest must be a URL.
  if (decoyShopRaw !== undefined) {
    url('DECOY_SHOP_BASE_URL', decoyShopRaw.replaceAll('{shop}', 'shop'), ['http:', 'https:']);
  }
  const decoyShopBaseUrl = decoyShopRaw === undefined ? baseUrl : decoyShopRaw.replace(/\/+$/, '');
  const databaseUrl = read(env, 'DATABASE_URL');
  if (databaseUrl !== undefined) url('DATABASE_URL', databaseUrl, ['postgres:', 'postgresql:']);

  const tunnelDomain = (read(env, 'TUNNEL_DOMAIN') ?? 'tunnel.localhost').toLowerCase();
  if (
    !/^(?=.{1,200}$)([a-z0-9]([a-z0-9-]*[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/.test(tunnelDomain)
  ) {
    throw new ConfigError(
      'TUNNEL_DOMAIN',
      `must be a DNS name such as tunnel.example.com, got "${tunnelDomain}"`,
    );
  }

  const internalRaw = read(env, 'INTERNAL_URL');
  const internalUrl =
    internalRaw === undefined
      ? undefined
      : url('INTERNAL_URL', internalRaw, ['http:', 'https:']).replace(/\/+$/, '');

  const secretKey = read(env, 'SECRET_KEY');
  if (secretKey !== undefined && secretKey.length < 32) {
    throw new ConfigError('SECRET_KEY', 'must be at least 32 characters (for example 64 hex characters)');
  }
  if (databaseUrl !== undefined && secretKey === undefined) {
    throw new ConfigError(
      'SECRET_KEY',
      'is required when DATABASE_URL is set (generate one with: openssl rand -hex 32)',
    );
  }

  const metricsToken = read(env, 'METRICS_TOKEN');
  if (metricsToken !== undefined && (metricsToken.length < 16 || /\s/.test(metricsToken))) {
    throw new ConfigError(
      'METRICS_TOKEN',
      'must be at least 16 characters without spaces (openssl rand -hex 24)',
    );
  }
  const smtpUrl = read(env, 'SMTP_URL');
  if (smtpUrl !== undefined) url('SMTP_URL', smtpUrl, ['smtp:', 'smtps:']);

  const rolesRaw = read(env, 'ROLES') ?? 'all';
  const roles = new Set<Role>();
  for (const part of rolesRaw.split(',').map((r) => r.trim().toLowerCase())) {
    if (part === 'all') for (const r of ALL_ROLES) roles.add(r);
    else if ((ALL_ROLES as readonly string[]).includes(part)) roles.add(part as Role);
    else throw new ConfigError('ROLES', `has unknown role "${part}" (known: all, ${ALL_ROLES.join(', ')})`);
  }

  const delaysRaw = read(env, 'WEBHOOK_RETRY_DELAYS') ?? '60,300,900,3600,21600';
  const webhookRetryDelaysSeconds = delaysRaw.split(',').map((part) => {
    const p = part.trim();
    if (!/^\d+$/.test(p) || Number(p) > 7 * 86400) {
      throw new ConfigError(
        'WEBHOOK_RETRY_DELAYS',
        `must be a comma-separated list of seconds, got "${delaysRaw}"`,
      );
    }
    return Number(p);
  });

  const logLevel = read(env, 'LOG_LEVEL') ?? 'info';
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', `must be one of fatal, error, warn, info, debug, trace, silent`);
  }

  const databasePoolWaitMs = integer(env, 'DATABASE_POOL_WAIT_MS', 2000, 10, 60_000);
  return {
    port,
    host,
    baseUrl,
    decoyShopBaseUrl,
    dataDir: read(env, 'DATA_DIR') ?? './data',
    databaseUrl,
    databasePoolSize: integer(env, 'DATABASE_POOL_SIZE', 20, 2, 1000),
    databasePoolWaitMs,
    spendBatch: {
      size: integer(env, 'SPEND_BATCH_SIZE', 32, 1, 32),
      concurrency: integer(env, 'SPEND_CONCURRENCY', 2, 1, 1000),
      maxWaitMs: databasePoolWaitMs,
    },
    shedEventLoopDelayMs: integer(env, 'SHED_EVENT_LOOP_DELAY_MS', 500, 0, 60_000),
    tunnelDomain,
    internalUrl,
    tunnelLeaseSeconds: integer(env, 'TUNNEL_LEASE_SECONDS', 30, 3, 3600),
    secretKey,
    smtpUrl,
    metricsToken,
    mailFrom: read(env, 'MAIL_FROM') ?? 'Bot Payment Service <no-reply@localhost>',
    trustProxy: trustProxySetting(read(env, 'TRUST_PROXY')),
    roles,
    registrationRateLimitPerHour: integer(env, 'REGISTRATION_RATE_LIMIT_PER_HOUR', 3, 1, 1_000_000),
    registrationRateLimitLoopbackPerHour:
      read(env, 'REGISTRATION_RATE_LIMIT_PER_HOUR') === undefined && isDevelopmentBaseUrl({ baseUrl })
        ? DEVELOPMENT_LOOPBACK_REGISTRATIONS_PER_HOUR
        : integer(env, 'REGISTRATION_RATE_LIMIT_PER_HOUR', 3, 1, 1_000_000),
    checkoutRateLimitPerHour: integer(env, 'CHECKOUT_RATE_LIMIT_PER_HOUR', 30, 1, 1_000_000),
    topupRequestsPerDay: integer(env, 'TOPUP_REQUESTS_PER_DAY', 10, 1, 10_000),
    topupRequestsOpenMax: integer(env, 'TOPUP_REQUESTS_OPEN_MAX', 3, 1, 1_000),
    approvalWindowSeconds: integer(env, 'APPROVAL_WINDOW_SECONDS', 900, 1, 7 * 86400),
    webhookTimeoutMs: integer(env, 'WEBHOOK_TIMEOUT_MS', 10_000, 1, 120_000),
    webhookSecretOverlapSeconds: integer(env, 'WEBHOOK_SECRET_OVERLAP_SECONDS', 86_400, 0, 30 * 86_400),
    webhookRetryDelaysSeconds,
    allowPrivateWebhookTargets: boolean(env, 'ALLOW_PRIVATE_WEBHOOK_TARGETS', false),
    deliveryLogRetentionDays: integer(env, 'DELIVERY_LOG_RETENTION_DAYS', 30, 1, 3650),
    auditLogRetentionDays: integer(env, 'AUDIT_LOG_RETENTION_DAYS', 365, 1, 36500),
    logLevel,
    statusCacheMs: integer(env, 'STATUS_CACHE_MS', 1000, 0, 60_000),
    x402: x402Setting(env),
  };
}

/** Registrations an hour from this machine itself while BASE_URL is on localhost (see the Config field). */
export const DEVELOPMENT_LOOPBACK_REGISTRATIONS_PER_HOUR = 100;

/** True when BASE_URL points at this machine: development, where plain-http callbacks are allowed. */
export function isDevelopmentBaseUrl(config: Pick<Config, 'baseUrl'>): boolean {
  const host = new URL(config.baseUrl).hostname;
  return host === 'localhost' || host === '127.0.0.1' || host === '[::1]' || host.endsWith('.localhost');
}
