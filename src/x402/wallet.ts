import type { X402Config } from '../config.ts';
import { audit } from '../owners/audit.ts';
import { announceRailChange } from '../owners/funding.ts';
import { lockOwnedBot } from '../owners/locks.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError, validationError } from '../platform/errors.ts';
import { microsToUsd } from '../platform/money.ts';
import { present } from '../platform/present.ts';
import { iso } from '../platform/time.ts';
import { loadEvm } from './evm.ts';

// The partner wallet's key pair: created by the service when the owner turns the rail on, or
// imported by the owner. The private key is encrypted with SECRET_KEY (the SecretBox) as soon as it
// exists and is decrypted only to sign an authorisation (src/x402/sign.ts); no response, event,
// audit entry or log line ever carries it.

export interface X402WalletRow {
  bot_id: string;
  network: string;
  asset: string;
  address: string;
  key_enc: string;
  key_source: 'generated' | 'imported';
  available_micros: number;
  held_micros: number;
  authorized_micros: number;
  chain_balance_micro: string | null;
  balance_read_at: Date | null;
  alerted_deficit_micro: string;
  per_transaction_micros: number;
  daily_micros: number;
  monthly_micros: number;
  approval_mode: 'ask_for_everything' | 'auto_approve_under_threshold';
  approval_threshold_micros: number;
  allow_pay_to: string[];
  deny_pay_to: string[];
  allow_domains: string[];
  deny_domains: string[];
  [key: string]: unknown;
}

export function requireX402Config(ctx: AppContext): X402Config {
  const cfg = ctx.config.x402;
  if (!cfg) {
    throw new ApiError(
      'rail_not_configured',
      'The partner wallet needs X402_NETWORK (and X402_RPC_URL) in the service configuration before it can be turned on.',
    );
  }
  return cfg;
}

/** A private key given by the owner: 32 bytes of hex with 0x. Refuses anything else without echoing it. */
export async function parsePrivateKey(raw: string): Promise<`0x${string}`> {
  const { isHex, privateKeyToAccount } = await loadEvm();
  const key = raw.trim();
  if (!isHex(key, { strict: true }) || key.length !== 66) {
    throw validationError('private_key must be 0x followed by 64 hex digits.', { field: 'private_key' });
  }
  try {
    privateKeyToAccount(key as `0x${string}`);
  } catch {
    throw validationError('private_key is not a valid secp256k1 private key.', { field: 'private_key' });
  }
  return key.toLowerCase() as `0x${string}`;
}

/**
 * Turns the partner_wallet rail on or off (PUT /api/v1/owner/bots/{id}/rails/partner_wallet). On:
 * creates the wallet with a new key pair unless it has one, or replaces the key with the imported
 * one (only while nothing is held or authorised, so no signed authorisation is orphaned).
 */
export async function setPartnerRail(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  status: 'active' | 'inactive',
  privateKey: string | undefined,
) {
  const now = ctx.clock.now();
  if (status === 'inactive' && privateKey !== undefined) {
    throw validationError('private_key can only be given when turning the rail on.', {
      field: 'private_key',
    });
  }
  const cfg = status === 'active' ? requireX402Config(ctx) : ctx.config.x402;
  const imported = privateKey === undefined ? undefined : await parsePrivateKey(privateKey);
  const { generatePrivateKey, getAddress, privateKeyToAccount } = await loadEvm();
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    let wallet = await loadWallet(tx, botId, true);
    if (status === 'active' && cfg) {
      if (wallet && wallet.network !== cfg.network) {
        throw new ApiError(
          'conflict',
          `This wallet was made for ${wallet.network} but the service is configured for ${cfg.network}.`,
        );
      }
      if (!wallet || imported) {
        const key = imported ?? generatePrivateKey();
        const address = privateKeyToAccount(key).address;
        if (wallet && (wallet.held_micros > 0 || wallet.authorized_micros > 0)) {
          throw new ApiError(
            'conflict',
            'The wallet has payments held or authorised; wait until they settle before importing another key.',
          );
        }
        const taken = await maybeOne(
          tx,
          'SELECT 1 FROM x402_wallets WHERE network = $1 AND address = $2 AND bot_id <> $3',
          [cfg.network, address, botId],
        );
        if (taken) throw new ApiError('conflict', 'This key is already the partner wallet of another bot.');
        const keyEnc = ctx.secrets.encrypt(key);
        const source = imported ? 'imported' : 'generated';
        if (wallet) {
          // A new key is a new address: the ledger's view of the old one no longer applies.
          if (wallet.available_micros > 0) {
            throw new ApiError(
              'conflict',
              'The current wallet still has a balance; move it out before importing another key.',
            );
          }
          await tx.query(
            `UPDATE x402_wallets SET address = $2, key_enc = $3, key_source = $4, chain_balance_micro = NULL,
                    balance_read_at = NULL, alerted_deficit_micro = 0, updated_at = $5 WHERE bot_id = $1`,
            [botId, address, keyEnc, source, new Date(now)],
          );
        } else {
          await tx.query(
            `INSERT INTO x402_wallets (bot_id, network, asset, address, key_enc, key_source, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)`,
            [botId, cfg.network, getAddress(cfg.usdcAddress), address, keyEnc, source, new Date(now)],
          );
        }
        await audit(tx, {
          ownerId,
          botId,
          action: imported ? 'x402.key_imported' : 'x402.key_created',
          details: { address, network: cfg.network },
          at: now,
        });
        wallet = present(await loadWallet(tx, botId), 'the partner wallet row');
      }
    }
    const address = wallet?.address ?? null;
    await tx.query(
      `INSERT INTO rails (bot_id, rail_key, status, address, updated_at) VALUES ($1, 'partner_wallet', $2, $3, $4)
       ON CONFLICT (bot_id, rail_key) DO UPDATE SET status = EXCLUDED.status, address = EXCLUDED.address,
         updated_at = EXCLUDED.updated_at`,
      [botId, status, address, new Date(now)],
    );
    const activeRails = await announceRailChange(tx, {
      ownerId,
      botId,
      rail: 'partner_wallet',
      status,
      address,
      now,
    });
    return {
      bot_id: botId,
      rail: 'partner_wallet' as const,
      status,
      active_rails: activeRails,
      ...(wallet ? { address: wallet.address, network: wallet.network, asset: wallet.asset } : {}),
    };
  });
}

export async function loadWallet(
  q: Queryable,
  botId: string,
  forUpdate = false,
): Promise<X402WalletRow | null> {
  const row = await maybeOne<X402WalletRow>(
    q,
    `SELECT * FROM x402_wallets WHERE bot_id = $1${forUpdate ? ' FOR UPDATE' : ''}`,
    [botId],
  );
  return row ? normaliseWallet(row) : null;
}

export function normaliseWallet(row: X402WalletRow): X402WalletRow {
  for (const k of [
    'available_micros',
    'held_micros',
    'authorized_micros',
    'per_transaction_micros',
    'daily_micros',
  ] as const)
    row[k] = Number(row[k]);
  row.monthly_micros = Number(row.monthly_micros);
  row.approval_threshold_micros = Number(row.approval_threshold_micros);
  for (const k of ['allow_pay_to', 'deny_pay_to', 'allow_domains', 'deny_domains'] as const) {
    const v = row[k] as unknown;
    row[k] = typeof v === 'string' ? (JSON.parse(v) as string[]) : ((v as string[]) ?? []);
  }
  return row;
}

/** micro-USDC (6 decimals) as a USD number, for display only. */
export function microToUsd(micro: string | bigint | null): number | null {
  if (micro === null) return null;
  return Number(BigInt(micro)) / 1_000_000;
}

/** The rail as the owner sees it (no key material). */
export function presentWallet(w: X402WalletRow, railStatus: string) {
  return {
    status: railStatus,
    network: w.network,
    asset: w.asset,
    address: w.address,
    key_source: w.key_source,
    balance_usd: microToUsd(w.chain_balance_micro),
    balance_read_at: w.balance_read_at ? iso(w.balance_read_at) : null,
    ledger: {
      available_usd: microsToUsd(w.available_micros),
      held_usd: microsToUsd(w.held_micros),
      authorized_usd: microsToUsd(w.authorized_micros),
    },
    limits: {
      per_transaction_usd: microsToUsd(w.per_transaction_micros),
      daily_usd: microsToUsd(w.daily_micros),
      monthly_usd: microsToUsd(w.monthly_micros),
      approval_mode: w.approval_mode,
      approval_threshold_usd: microsToUsd(w.approval_threshold_micros),
    },
    lists: {
      allow_pay_to: w.allow_pay_to,
      deny_pay_to: w.deny_pay_to,
      allow_domains: w.allow_domains,
      deny_domains: w.deny_domains,
    },
  };
}
