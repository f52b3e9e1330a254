import { Writable } from 'node:stream';
import { buildApp } from '../../src/app.ts';
import { type Config, parseConfig } from '../../src/config.ts';
import { createOwnerToken, findOrCreateOwner } from '../../src/owners/auth.ts';
import { FakeClock } from '../../src/platform/clock.ts';
import type { AppContext } from '../../src/platform/context.ts';
import { createSecretBox } from '../../src/platform/crypto.ts';
import type { App } from '../../src/platform/http.ts';
import { createLogger } from '../../src/platform/logger.ts';
import type { Mail, Mailer } from '../../src/platform/mailer.ts';
import { createMetrics } from '../../src/platform/metrics.ts';
import { createTestDatabase, type TestDatabase } from './db.ts';

export const TEST_SECRET_KEY = 'test-secret-key-0123456789abcdef0123456789abcdef';

export function testConfig(env: Record<string, string> = {}): Config {
  return parseConfig({
    BASE_URL: 'http://localhost:8080',
    SECRET_KEY: TEST_SECRET_KEY,
    ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
    LOG_LEVEL: 'info',
    // Tests run PGlite on their own thread (the service runs it on a thread of its own), where its
    // queries hold the event loop by design: shedding on the loop's delay would refuse test requests.
    SHED_EVENT_LOOP_DELAY_MS: '0',
    ...env,
  });
}

/** Captures mails instead of sending them (the SMTP server is the edge of the world). */
export class CapturingMailer implements Mailer {
  readonly sent: Mail[] = [];
  async send(mail: Mail): Promise<void> {
    this.sent.push(mail);
  }
  async close(): Promise<void> {}
}

export interface TestService {
  app: App;
  ctx: AppContext;
  clock: FakeClock;
  mailer: CapturingMailer;
  database: TestDatabase;
  /** Every log line written so far (JSON text). */
  logs(): string;
  close(): Promise<void>;
}

/**
 * A test service whose mailer fails while `down.value` is true (an SMTP outage), on a shared
 * database and clock so several instances can stand for restarts and crashes.
 */
export async function createTestServiceWithMailOutage(
  options: { database: TestDatabase; clock: FakeClock },
  down: { value: boolean },
): Promise<TestService> {
  const svc = await createTestService(options);
  const send = svc.mailer.send.bind(svc.mailer);
  svc.mailer.send = async (mail: Mail) => {
    if (down.value) throw new Error('SMTP connection refused');
    await send(mail);
  };
  return svc;
}

export async function createTestService(
  options: { env?: Record<string, string>; database?: TestDatabase; clock?: FakeClock } = {},
): Promise<TestService> {
  const database = options.database ?? (await createTestDatabase());
  const config = testConfig(options.env);
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  const clock = options.clock ?? new FakeClock();
  const mailer = new CapturingMailer();
  const ctx: AppContext = {
    config,
    db: database.db,
    clock,
    secrets: createSecretBox(TEST_SECRET_KEY),
    mailer,
    logger: createLogger(config.logLevel, stream),
    metrics: createMetrics(database.db),
  };
  const app = await buildApp(ctx);
  await app.ready();
  return {
    app,
    ctx,
    clock,
    mailer,
    database,
    logs: () => chunks.join(''),
    async close() {
      await app.close();
      if (!options.database) await database.drop();
    },
  };
}

let ipCounter = 0;
/** A fresh client address per call, so registration rate limits do not couple unrelated tests. */
export function nextIp(): string {
  ipCounter++;
  return `10.${(ipCounter >> 16) & 255}.${(ipCounter >> 8) & 255}.${ipCounter & 255}`;
}

export interface RegisteredBot {
  bot_id: string;
  api_key: string;
  claim_token: string | null;
  webhook_secret: string;
  tunnel_token?: string;
  primary_hooks_token?: string;
  webhook_url?: string;
  [key: string]: unknown;
}

export async function registerBot(
  svc: TestService,
  body: Record<string, unknown> = {},
  ip = nextIp(),
): Promise<RegisteredBot> {
  const res = await svc.app.inject({
    method: 'POST',
    url: '/api/v1/bots/register',
    remoteAddress: ip,
    payload: {
      bot_name: `bot-${Math.random().toString(36).slice(2, 10)}`,
      owner_email: 'owner@example.com',
      // A port where nothing listens; a service refusing private targets refuses it at registration,
      // so there a name that never resolves (RFC 6761) stands in.
      callback_url: svc.ctx.config.allowPrivateWebhookTargets
        ? 'http://127.0.0.1:9/hook'
        : 'https://webhooks.invalid/hook',
      ...body,
    },
  });
  if (res.statusCode !== 201) throw new Error(`registration failed: ${res.statusCode} ${res.body}`);
  return res.json() as RegisteredBot;
}

export async function createOwner(
  svc: TestService,
  email = `owner-${Math.random().toString(36).slice(2, 8)}@example.com`,
) {
  const now = svc.clock.now();
  return svc.ctx.db.transaction(async (tx) => {
    const owner = await findOrCreateOwner(tx, email, now);
    const token = await createOwnerToken(tx, owner.id, now);
    return { id: owner.id, email: owner.email, token, auth: { authorization: `Bearer ${token}` } };
  });
}

export type TestOwner = Awaited<ReturnType<typeof createOwner>>;

/** Master budgets wider than anything a test buys: for tests about other limits. */
export const GENEROUS_MASTER_BUDGETS = {
  per_transaction_cents: 100_000,
  daily_budget_cents: 10_000_000,
  monthly_budget_cents: 100_000_000,
};

/** Sets an owner's master budgets through PUT /owner/guardrails. */
export async function putGuardrails(
  svc: TestService,
  owner: TestOwner,
  budgets: { per_transaction_cents: number; daily_budget_cents: number; monthly_budget_cents: number },
): Promise<void> {
  const res = await svc.app.inject({
    method: 'PUT',
    url: '/api/v1/owner/guardrails',
    headers: owner.auth,
    payload: budgets,
  });
  if (res.statusCode !== 200) throw new Error(`guardrails failed: ${res.statusCode} ${res.body}`);
}

/** Gives an owner GENEROUS_MASTER_BUDGETS through PUT /owner/guardrails. */
export function giveGenerousBudgets(svc: TestService, owner: TestOwner): Promise<void> {
  return putGuardrails(svc, owner, GENEROUS_MASTER_BUDGETS);
}

/** Registers a bot, claims it for the owner and optionally funds it. */
export async function activeBot(
  svc: TestService,
  owner: TestOwner,
  options: { fundCents?: number; body?: Record<string, unknown> } = {},
) {
  const bot = await registerBot(svc, { owner_email: owner.email, ...options.body });
  const claim = await svc.app.inject({
    method: 'POST',
    url: '/api/v1/owner/claims',
    headers: owner.auth,
    payload: { claim_token: bot.claim_token },
  });
  if (claim.statusCode !== 200) throw new Error(`claim failed: ${claim.statusCode} ${claim.body}`);
  if (options.fundCents) {
    const fund = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: options.fundCents },
    });
    if (fund.statusCode !== 200) throw new Error(`fund failed: ${fund.statusCode} ${fund.body}`);
  }
  return { ...bot, auth: { authorization: `Bearer ${bot.api_key}` } };
}
