import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
