import { audit } from '../owners/audit.ts';
import { assertOwnedBot, lockOwnedBot } from '../owners/locks.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { ApiError, validationError } from '../platform/errors.ts';
import { centsToMicros } from '../platform/money.ts';
import { checksummed } from './requirements.ts';
import { presentPayment, type X402PaymentRow } from './service.ts';
import { loadWallet, presentWallet } from './wallet.ts';

// The owner's side of the partner wallet: its address, balance, limits and lists, and payments.

export interface X402SettingsInput {
  per_transaction_cents?: number;
  daily_cents?: number;
  monthly_cents?: number;
  approval_mode?: 'ask_for_everything' | 'auto_approve_under_threshold';
  approval_threshold_cents?: number;
  allow_pay_to?: string[];
  deny_pay_to?: string[];
  allow_domains?: string[];
  deny_domains?: string[];
}

async function ownedWallet(ctx: AppContext, ownerId: string, botId: string) {
  await assertOwnedBot(ctx.db, ownerId, botId);
  const wallet = await loadWallet(ctx.db, botId);
  const rail = await maybeOne<{ status: string }>(
    ctx.db,
    `SELECT status FROM rails WHERE bot_id = $1 AND rail_key = 'partner_wallet'`,
    [botId],
  );
  return { wallet, railStatus: rail?.status ?? 'inactive' };
}

/** GET /api/v1/owner/bots/{id}/x402: the wallet (404 when the rail was never turned on). */
export async function getX402Wallet(ctx: AppContext, ownerId: string, botId: string) {
  const { wallet, railStatus } = await ownedWallet(ctx, ownerId, botId);
  if (!wallet) throw new ApiError('not_found', 'This bot has no partner wallet yet: turn the rail on first.');
  return { bot_id: botId, ...presentWallet(wallet, railStatus) };
}

function domainEntry(value: string): string {
  const v = value.trim().toLowerCase();
  if (
    !/^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/.test(v) ||
    v.length > 253
  ) {
    throw validationError(
      `"${value.slice(0, 100)}" is not a host name (use api.example.com or *.example.com).`,
      {
        field: 'domains',
      },
    );
  }
  return v;
}

/** PATCH /api/v1/owner/bots/{id}/x402: limits, approval mode and lists. */
export async function updateX402Settings(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  input: X402SettingsInput,
) {
  const now = ctx.clock.now();
  const lists = {
    allow_pay_to: await checksummedList(input.allow_pay_to, 'allow_pay_to'),
    deny_pay_to: await checksummedList(input.deny_pay_to, 'deny_pay_to'),
    allow_domains: input.allow_domains?.map(domainEntry),
    deny_domains: input.deny_domains?.map(domainEntry),
  };
  await ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    const wallet = await loadWallet(tx, botId, true);
    if (!wallet)
      throw new ApiError('not_found', 'This bot has no partner wallet yet: turn the rail on first.');
    const sets: string[] = [];
    const params: unknown[] = [botId];
    const put = (column: string, value: unknown) => {
      if (value === undefined) return;
      params.push(value);
      sets.push(`${column} = $${params.length}`);
    };
    // Limits are given in whole cents (the API's `…_cents`) and stored in micros.
    const micros = (cents: number | undefined) => (cents === undefined ? undefined : centsToMicros(cents));
    put('per_transaction_micros', micros(input.per_transaction_cents));
    put('daily_micros', micros(input.daily_cents));
    put('monthly_micros', micros(input.monthly_cents));
    put('approval_mode', input.approval_mode);
    put('approval_threshold_micros', micros(input.approval_threshold_cents));
    for (const [k, v] of Object.entries(lists))
      put(k, v === undefined ? undefined : JSON.stringify([...new Set(v)]));
    if (sets.length === 0) return;
    params.push(new Date(now));
    await tx.query(
      `UPDATE x402_wallets SET ${sets.join(', ')}, updated_at = $${params.length} WHERE bot_id = $1`,
      params,
    );
    await audit(tx, {
      ownerId,
      botId,
      action: 'x402.settings_updated',
      details: { ...input, ...Object.fromEntries(Object.entries(lists).filter(([, v]) => v !== undefined)) },
      at: now,
    });
  });
  return getX402Wallet(ctx, ownerId, botId);
}

/** GET /api/v1/owner/bots/{id}/x402/payments: newest first, with on-chain transaction hashes. */
export async function listX402Payments(ctx: AppContext, ownerId: string, botId: string, limit = 50) {
  await ownedWallet(ctx, ownerId, botId);
  const rows = await ctx.db.query<X402PaymentRow>(
    'SELECT * FROM x402_payments WHERE bot_id = $1 AND owner_id = $2 ORDER BY created_at DESC LIMIT $3',
    [botId, ownerId, limit],
  );
  return { bot_id: botId, payments: rows.map(presentPayment) };
}

/** Each address checked in turn: the first bad one is the one refused, by its index. */
async function checksummedList(list: unknown[] | undefined, name: string): Promise<string[] | undefined> {
  if (list === undefined) return undefined;
  const out: string[] = [];
  for (const [i, address] of list.entries()) out.push(await checksummed(address, `${name}[${i}]`));
  return out;
}
