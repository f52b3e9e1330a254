import { getAddress } from 'viem';
import { expect } from 'vitest';
import { x402Moves } from '../../src/wallet/ledger.ts';
import type { activeBot, TestOwner, TestService } from '../support/service.ts';

export const USDC = getAddress('0x5fbdb2315678afecb367f032d93f642f64180aa3');
export const PAY_TO = getAddress('0x70997970c51812dc3a010c7d01b50e20d17dc79c');
export const OTHER_PAY_TO = getAddress('0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc');
/** An unreachable RPC: tests that never read the chain. */
export const X402_ENV = {
  X402_NETWORK: 'eip155:31337',
  X402_RPC_URL: 'http://127.0.0.1:9',
  X402_USDC_ADDRESS: USDC,
};

export type Bot = Awaited<ReturnType<typeof activeBot>>;

/** The address in mixed case with one letter's case flipped: a checksum that does not match. */
export function wrongChecksum(address: string): string {
  const i = [...address].findIndex((c, k) => k > 1 && /[a-fA-F]/.test(c));
  const c = address[i]!;
  return (
    address.slice(0, i) + (c === c.toLowerCase() ? c.toUpperCase() : c.toLowerCase()) + address.slice(i + 1)
  );
}

export function requirement(overrides: Record<string, unknown> = {}) {
  return {
    scheme: 'exact',
    network: 'eip155:31337',
    asset: USDC,
    amount: '10000',
    payTo: PAY_TO,
    maxTimeoutSeconds: 60,
    extra: { name: 'USD Coin', version: '2' },
    ...overrides,
  };
}

/** Turns the partner wallet on (the service makes the key) and applies settings. */
export async function enableWallet(
  svc: TestService,
  owner: TestOwner,
  botId: string,
  settings: Record<string, unknown> = {},
): Promise<{ address: string }> {
  const on = await svc.app.inject({
    method: 'PUT',
    url: `/api/v1/owner/bots/${botId}/rails/partner_wallet`,
    headers: owner.auth,
    payload: { status: 'active' },
  });
  expect(on.statusCode, on.body).toBe(200);
  if (Object.keys(settings).length > 0) {
    const patch = await svc.app.inject({
      method: 'PATCH',
      url: `/api/v1/owner/bots/${botId}/x402`,
      headers: owner.auth,
      payload: settings,
    });
    expect(patch.statusCode, patch.body).toBe(200);
  }
  return { address: on.json().address as string };
}

/** Credits the ledger as the reconciliation job does when USDC arrives on chain. */
export async function creditDeposit(svc: TestService, botId: string, cents: number): Promise<void> {
  await svc.ctx.db.transaction((tx) =>
    x402Moves.deposit(tx, botId, cents * 10_000, svc.clock.now(), `test-deposit:${Math.random()}`),
  );
}

export async function payRequest(
  svc: TestService,
  bot: Bot,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
) {
  return svc.app.inject({
    method: 'POST',
    url: '/api/v1/bot/x402/pay',
    headers: { ...bot.auth, ...headers },
    payload: body,
  });
}

export async function walletRow(svc: TestService, botId: string) {
  return (
    await svc.ctx.db.query<{ available_micros: string; held_micros: string; authorized_micros: string }>(
      'SELECT available_micros, held_micros, authorized_micros FROM x402_wallets WHERE bot_id = $1',
      [botId],
    )
  )[0]!;
}

/** Everything a refused payment must leave untouched. */
export async function snapshot(svc: TestService, botId: string) {
  const q = async (sql: string) => JSON.stringify(await svc.ctx.db.query(sql, [botId]));
  return [
    await q('SELECT available_micros, held_micros, authorized_micros FROM x402_wallets WHERE bot_id = $1'),
    await q('SELECT count(*)::int AS n FROM x402_payments WHERE bot_id = $1'),
    await q('SELECT count(*)::int AS n FROM ledger_entries WHERE bot_id = $1'),
    await q('SELECT count(*)::int AS n FROM events WHERE bot_id = $1'),
    await q(
      `SELECT scope, day_start, day_micros, month_start, month_micros FROM spend_windows WHERE scope LIKE '%' || $1 || '%' OR scope LIKE 'owner:%' ORDER BY 1`,
    ),
  ].join('\n');
}
