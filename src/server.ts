import { resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { buildApp } from './app.ts';
import { type Config, ConfigError } from './config.ts';
import { ALL_JOBS } from './jobs/index.ts';
import type { BackgroundJob } from './jobs/runner.ts';
import { startJobs } from './jobs/runner.ts';
import { type Clock, systemClock } from './platform/clock.ts';
import type { AppContext } from './platform/context.ts';
import { createSecretBox, type SecretBox } from './platform/crypto.ts';
import { migrate } from './platform/db/migrate.ts';
import { openDatabase, resolveSecretKey, sampleStoredSecrets } from './platform/db/open.ts';
import type { Db, Queryable } from './platform/db/port.ts';
import type { App } from './platform/http.ts';
import { createLogger } from './platform/logger.ts';
import { createMailer, type Mailer } from './platform/mailer.ts';
import { createMetrics } from './platform/metrics.ts';
import { checkListenAddress, ensureDataDir } from './platform/startupChecks.ts';
import { spendQueueIdle } from './spend/run.ts';

/** How long a closing instance lets its queued purchases finish before the database closes. */
const PURCHASE_QUEUE_CLOSE_WAIT_MS = 10_000;

export interface Service {
  app: App;
  ctx: AppContext;
  /** Stops accepting, finishes in-flight requests, stops background jobs, closes the database. */
  close(): Promise<void>;
  /** Milliseconds each start-up step took (the CLI logs them with "service started"). */
  startupMs: StartupTimings;
}

export interface StartupTimings {
  /** From the process's start until the database is opened: Node, the service's modules, the configuration. */
  beforeOpen: number;
  /** Opening the database (PGlite: loading its data directory), or what was left of it once this began. */
  open: number;
  /** Checking (and applying) migrations and the SECRET_KEY. */
  migrate: number;
  /** Building the app: plugins, routes, their validators and serializers. */
  app: number;
  listen: number;
  jobs: number;
}

export interface StartOptions {
  /**
   * The database, or its opening under way (`botpay serve` opens it while this module loads). When
   * given, the listening address and DATA_DIR are the caller's to have checked.
   */
  db?: Db | Promise<Db>;
  clock?: Clock;
  mailer?: Mailer;
  logStream?: NodeJS.WritableStream;
  jobs?: readonly BackgroundJob[];
  /** Listen on config.port (default true). Tests that use inject() can skip it. */
  listen?: boolean;
  /** Called once the server listens, before the background jobs start (the CLI's human lines). */
  onListening?: () => void;
}

/** Builds the context (database, secrets, mail), migrates, and starts the app and its jobs. */
export async function startService(config: Config, options: StartOptions = {}): Promise<Service> {
  // What an operator gets wrong first is judged before the database starts (seconds of work), each
  // in one line naming its variable: the listening address, then DATA_DIR.
  if ((options.listen ?? true) && !options.db) await checkListenAddress(config.host, config.port);
  if (!config.databaseUrl && !options.db) await ensureDataDir(resolve(config.dataDir));
  const logger = createLogger(config.logLevel, options.logStream);
  const secretKey = await resolveSecretKey(config);
  let mark = performance.now();
  const beforeOpen = Math.round(mark);
  const lap = () => {
    const now = performance.now();
    const ms = Math.round(now - mark);
    mark = now;
    return ms;
  };
  const db = await (options.db ?? openDatabase(config));
  const open = lap();
  const secrets = createSecretBox(secretKey);
  try {
    const applied = await migrate(db);
    if (applied.length > 0) logger.info({ applied }, 'migrations applied');
    await checkSecretKey(db, secrets);
  } catch (error) {
    await db.close();
    throw error;
  }
  const migrated = lap();
  const ctx: AppContext = {
    config,
    db,
    clock: options.clock ?? systemClock,
    secrets,
    mailer: options.mailer ?? createMailer({ smtpUrl: config.smtpUrl, from: config.mailFrom, logger }),
    logger,
    metrics: createMetrics(db),
  };
  const app = await buildApp(ctx);
  const built = lap();
  if (options.listen ?? true) {
    await app.listen({
      port: config.port,
      host: config.host,
      // Fastify would log only the socket address (http://127.0.0.1:PORT), which is not where the
      // dashboard works: its forms and cookies belong to BASE_URL.
      listenTextResolver: (address) => `listening on ${address}; public address (BASE_URL) ${config.baseUrl}`,
    });
  }
  const listened = lap();
  options.onListening?.();
  const jobs = await startJobs(ctx, options.jobs ?? ALL_JOBS);
  const startupMs = { beforeOpen, open, migrate: migrated, app: built, listen: listened, jobs: lap() };
  let closing: Promise<void> | undefined;
  return {
    app,
    ctx,
    startupMs,
    close() {
      closing ??= (async () => {
        // Closing the server waits for every open connection. Node closes the idle keep-alive ones
        // when the close begins, but a connection whose request was still running then stays open
        // once answered, until its client lets it go (72 s: keepAliveTimeout) — a SIGTERM during a
        // request took over a minute to stop the service. Such connections are closed as soon as
        // they fall idle (their request answered; nothing in flight is cut).
        const closed = app.close();
        const idle = setInterval(() => app.server.closeIdleConnections?.(), 50);
        try {
          await closed;
        } finally {
          clearInterval(idle);
        }
        await jobs.stop();
        // Purchases still queued for a batch (src/spend/batch.ts) belong to requests whose clients
        // went away before the close (the others were answered above): they run before the pool
        // closes, rather than failing on it.
        await spendQueueIdle(db, PURCHASE_QUEUE_CLOSE_WAIT_MS);
        await ctx.mailer.close();
        await db.close();
      })();
      return closing;
    },
  };
}

/**
 * Refuses to start with a SECRET_KEY that is not the one the stored secrets were written with:
 * such a service would fail every request that needs one (webhook signatures, card details), and
 * a checkout would be recorded before its answer failed (src/checkout/service.ts). The newest bots'
 * webhook secrets are tried; when none decrypts, start-up stops with a one-line cause. A single
 * damaged row does not stop it (`botpay doctor` reports it).
 */
export async function checkSecretKey(db: Queryable, secrets: SecretBox): Promise<void> {
  const { checked, failures } = await sampleStoredSecrets(db, secrets);
  if (checked === 0 || failures < checked) return;
  throw new ConfigError(
    'SECRET_KEY',
    `does not decrypt the secrets stored in this database (none of the ${checked} newest bots' webhook secrets): start with the key they were written with.`,
  );
}
