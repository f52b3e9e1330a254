import autocannon from 'autocannon';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildSplit, type CardStart } from '../src/cards/split.ts';
import { runCli } from '../test/support/process.ts';
import { benchSchema, type Child, startChild } from './lib.ts';

export const BENCH_SECRET_KEY = 'bench-secret-key-0123456789abcdef0123456789abcdef';

export interface BenchService {
  child: Child;
  ownerToken: string;
  database: 'postgres' | 'embedded';
  env: Record<string, string>;
  stop(): Promise<void>;
}

/** Starts `botpay serve` on a fresh PostgreSQL schema or embedded data dir, with an owner token. */
export async function startBenchService(
  database: 'postgres' | 'embedded',
  extraEnv: Record<string, string> = {},
): Promise<BenchService> {
  const env: Record<string, string> = {
    SECRET_KEY: BENCH_SECRET_KEY,
    REGISTRATION_RATE_LIMIT_PER_HOUR: '1000000',
    CHECKOUT_RATE_LIMIT_PER_HOUR: '1000000',
    ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
    LOG_LEVEL: 'warn',
    ...extraEnv,
  };
  let drop = async () => {};
  if (database === 'postgres') {
    const schema = await benchSchema();
    env.DATABASE_URL = schema.url;
    drop = schema.drop;
  } else {
    env.DATA_DIR = await mkdtemp(join(tmpdir(), 'botpay-bench-'));
  }
  // With the embedded database the CLI must run before the service holds the data directory.
  const token = await runCli(['owner', 'token', 'create', '--email', 'bench@example.com'], env);
  if (token.code !== 0) throw new Error(`owner token create failed: ${token.stderr}`);
  const child = await startChild(undefined, env, '/readyz');
  return {
    child,
    ownerToken: token.stdout.trim(),
    database,
    env,
    async stop() {
      await child.stop();
      await drop();
    },
  };
}

async function json(res: Response): Promise<Record<string, unknown>> {
  const body = (await res.json()) as Record<string, unknown>;
  if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(body)}`);
  return body;
}

/** Registers, claims and funds `count` bots through the public API; returns their ids and keys. */
export async function seedBots(
  svc: BenchService,
  count: number,
  fundCents = 1_000_000,
): Promise<Array<{ botId: string; apiKey: string }>> {
  const bots: Array<{ botId: string; apiKey: string }> = [];
  const owner = { authorization: `Bearer ${svc.ownerToken}`, 'content-type': 'application/json' };
  for (let i = 0; i < count; i++) {
    const reg = await json(
      await fetch(`${svc.child.url}/api/v1/bots/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          bot_name: `bench-${i}`,
          owner_email: 'bench@example.com',
          callback_url: 'http://127.0.0.1:9/h',
        }),
      }),
    );
    await json(
      await fetch(`${svc.child.url}/api/v1/owner/claims`, {
        method: 'POST',
        headers: owner,
        body: JSON.stringify({ claim_token: reg.claim_token }),
      }),
    );
    if (fundCents > 0) {
      await json(
        await fetch(`${svc.child.url}/api/v1/owner/bots/${reg.bot_id}/wallet/fund`, {
          method: 'POST',
          headers: owner,
          body: JSON.stringify({ amount_cents: fundCents }),
        }),
      );
    }
    bots.push({ botId: String(reg.bot_id), apiKey: String(reg.api_key) });
  }
  return bots;
}

/** A JSON call to the service; throws with the answer on anything but 2xx. */
export async function call(url: string, method: string, headers: Record<string, string>, body?: unknown) {
  const res = await fetch(url, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (!res.ok) throw new Error(`${method} ${url}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

export interface CheckoutBot {
  botId: string;
  auth: string;
  profile: number;
}

/** The owner's master guardrails wide enough that only a card's own rules decide. */
export async function openOwnerGuardrails(base: string, ownerAuth: Record<string, string>): Promise<void> {
  await call(`${base}/api/v1/owner/guardrails`, 'PUT', ownerAuth, {
    per_transaction_cents: 100_000,
    daily_budget_cents: 100_000_000,
    monthly_budget_cents: 1_000_000_000,
  });
}

/** Cards seeded so far in this process: each gets an expiry of its own (below). */
let cardsSeeded = 0;

/**
 * A bot registered, claimed by the owner, funded with $10,000, with a card split like the card
 * wizard does from a made-up Luhn-valid number (never a real card) and wide limits. Each card gets
 * another expiry month: an owner's cards of one length and expiry are taken for the same card
 * (`possible_same_card`), and the benches give one owner many bots.
 */
export async function seedCheckoutBot(
  base: string,
  ownerAuth: Record<string, string>,
  options: { name: string; ownerEmail: string; approvalMode: string },
): Promise<CheckoutBot> {
  const reg = await call(
    `${base}/api/v1/bots/register`,
    'POST',
    {},
    { bot_name: options.name, owner_email: options.ownerEmail, callback_url: 'http://127.0.0.1:9/hook' },
  );
  const botId = reg.bot_id as string;
  await call(`${base}/api/v1/owner/claims`, 'POST', ownerAuth, { claim_token: reg.claim_token });
  await call(`${base}/api/v1/owner/bots/${botId}/wallet/fund`, 'POST', ownerAuth, {
    amount_cents: 1_000_000,
  });
  const card = await call(`${base}/api/v1/owner/bots/${botId}/cards`, 'POST', ownerAuth, {});
  const cardUrl = `${base}/api/v1/owner/bots/${botId}/cards/${card.card_id}`;
  const { activation } = buildSplit(
    {
      number: '4532015112830366',
      expiry_month: String((cardsSeeded % 12) + 1).padStart(2, '0'),
      expiry_year: String(2030 + Math.floor(cardsSeeded++ / 12)),
      cardholder_name: 'Bench Owner',
      billing_address: { line1: '1 Main St', city: 'Springfield', postal_code: '12345', country: 'US' },
    },
    { ...(card as unknown as CardStart), bot_id: botId },
    new Date(),
  );
  await call(`${cardUrl}/activate`, 'POST', ownerAuth, activation);
  await call(cardUrl, 'PATCH', ownerAuth, {
    approval_mode: options.approvalMode,
    approval_threshold_cents: 100_000,
    per_transaction_cents: 100_000,
    daily_cents: 100_000_000,
    monthly_cents: 1_000_000_000,
  });
  const profile = card.real_profile_index as number;
  await call(`${cardUrl}/profiles/${profile}`, 'PUT', ownerAuth, {
    allowance_cents: 1_000_000_000,
    allowance_window: 'month',
  });
  return { botId, auth: `Bearer ${reg.api_key}`, profile };
}

/**
 * Approved-size checkouts ($1) from `bots` in turn over `connections` connections for `seconds`
 * (closed loop, or `rate` requests per second in all).
 */
export function checkoutLoad(
  url: string,
  connections: number,
  bots: CheckoutBot[],
  seconds: number,
  rate?: number,
) {
  let i = 0;
  return autocannon({
    url,
    connections,
    duration: seconds,
    ...(rate ? { overallRate: rate } : {}),
    requests: [
      {
        method: 'POST',
        path: '/api/v1/bot/merchant/checkout',
        setupRequest: (req) => {
          const bot = bots[i++ % bots.length];
          if (!bot) throw new Error('no bots to check out with');
          return {
            ...req,
            headers: { ...req.headers, authorization: bot.auth, 'content-type': 'application/json' },
            body: JSON.stringify({
              profile_index: bot.profile,
              merchant_name: 'Capacity Store',
              merchant_url: 'https://capacity.example/item',
              item_name: 'Widget',
              amount_cents: 100,
              category: 'retail',
            }),
          };
        },
      },
    ],
  });
}
