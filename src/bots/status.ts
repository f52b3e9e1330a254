import { spentInWindowSql } from '../spend/counters.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { notFound } from '../platform/errors.ts';
import { microsToUsd } from '../platform/money.ts';
import { windowStart } from '../platform/time.ts';
import { openTopupsSql } from '../topups/service.ts';
import { messageQueueEventIdsSql } from '../webhooks/messageQueue.ts';
import type { StatusResponseT, WalletCheckResponseT } from './schemas.ts';
import type { BotStateCache } from './stateCache.ts';

// GET /api/v1/bot/status and GET /api/v1/bot/wallet/check, each answered by one query.

interface BotStateRow {
  id: string;
  name: string;
  owner_id: string | null;
  webhook_status: string;
  webhook_fail_count: number;
  wallet_status: 'pending' | 'active' | 'frozen';
  /** The balance the bot sees: available − decoy reserve (docs/security.md). */
  visible_micros: number;
  master_per_transaction_micros: number | null;
  master_daily_micros: number | null;
  master_monthly_micros: number | null;
  bot_month_spent: number;
  rails: Array<{ rail_key: string; status: string; address: string | null }> | null;
  pending_messages: number;
  active_cards: number;
  pending_topups: number;
  /** The partner wallet (src/x402/): its address and the last balance read from the chain. */
  x402_address: string | null;
  x402_network: string | null;
  x402_balance_micro: string | null;
  x402_balance_read_at: Date | null;
  [key: string]: unknown;
}

const STATE_SQL = `
SELECT b.id, b.name, b.owner_id, b.webhook_status, b.webhook_fail_count,
       w.status AS wallet_status, w.available_micros - w.decoy_spent_micros - w.decoy_held_micros AS visible_micros,
       o.master_per_transaction_micros, o.master_daily_micros, o.master_monthly_micros,
       coalesce(${spentInWindowSql('month', "'bot:' || b.id", '$2')}, 0) AS bot_month_spent,
       (SELECT json_agg(json_build_object('rail_key', r.rail_key, 'status', r.status, 'address', r.address)
                        ORDER BY r.rail_key)
          FROM rails r WHERE r.bot_id = b.id) AS rails,
       (SELECT count(*)::int FROM events e
         WHERE e.id IN ${messageQueueEventIdsSql('b.id')} AND e.acked_at IS NULL) AS pending_messages,
       ${activeCardsSql('b.id')} AS active_cards,
       ${openTopupsSql('b.id', '$3')} AS pending_topups,
       xw.address AS x402_address, xw.network AS x402_network, xw.chain_balance_micro AS x402_balance_micro,
       xw.balance_read_at AS x402_balance_read_at
  FROM bots b
  JOIN wallets w ON w.bot_id = b.id
  LEFT JOIN owners o ON o.id = b.owner_id
  LEFT JOIN x402_wallets xw ON xw.bot_id = b.id
 WHERE b.id = $1`;

function activeCardsSql(botIdExpr: string): string {
  return `(SELECT count(*)::int FROM cards c WHERE c.bot_id = ${botIdExpr} AND c.status = 'active')`;
}

async function loadState(ctx: AppContext, botId: string): Promise<BotStateRow> {
  const row = await maybeOne<BotStateRow>(ctx.db, STATE_SQL, [
    botId,
    windowStart('month', ctx.clock.now()),
    new Date(ctx.clock.now()),
  ]);
  if (!row) throw notFound('Bot');
  return row;
}

/**
 * The bot's spending figures. Both come from this bot's own counter, which every profile's purchases
 * reach, so they move alike whichever profile was used (the owner's master counter moves only on
 * real purchases, and its other bots' spending is not this bot's to see): monthly_spent_usd is
 * what this bot spent this month, monthly_remaining_usd the owner's monthly budget less it.
 */
function spendingLimits(row: BotStateRow) {
  const monthly = row.master_monthly_micros ?? 0;
  return {
    per_transaction_usd: microsToUsd(row.master_per_transaction_micros ?? 0),
    monthly_usd: microsToUsd(monthly),
    monthly_spent_usd: microsToUsd(row.bot_month_spent),
    monthly_remaining_usd: microsToUsd(Math.max(0, monthly - row.bot_month_spent)),
  };
}

export type BotStatus = 'pending' | 'active' | 'frozen' | 'inactive';

export function statusOf(row: {
  owner_id: string | null;
  wallet_status: string;
  active_rail_count: number;
}): BotStatus {
  if (row.owner_id === null) return 'pending';
  if (row.wallet_status === 'frozen') return 'frozen';
  return row.active_rail_count > 0 ? 'active' : 'inactive';
}

/** The status answer read from the database, with the owner whose changes drop it (what the cache keeps). */
export async function computeStatus(
  ctx: AppContext,
  botId: string,
): Promise<{ value: StatusResponseT; ownerId: string | null }> {
  const row = await loadState(ctx, botId);
  return { value: presentStatus(row), ownerId: row.owner_id };
}

/** GET /api/v1/bot/status, from the state cache when one is given. */
export async function botStatus(
  ctx: AppContext,
  botId: string,
  cache?: BotStateCache,
): Promise<StatusResponseT> {
  if (!cache) return (await computeStatus(ctx, botId)).value;
  return cache.get('status', botId, (id) => computeStatus(ctx, id));
}

function presentStatus(row: BotStateRow): StatusResponseT {
  const rails = row.rails ?? [];
  const activeRails = rails.filter((r) => r.status === 'active').map((r) => r.rail_key);
  const status = statusOf({ ...row, active_rail_count: activeRails.length });
  if (status === 'pending') {
    return {
      bot_id: row.id,
      bot_name: row.name,
      status,
      default_rail: null,
      rails: {},
      master_guardrails: null,
      message:
        'Your owner has not claimed you yet. Give them your claim_token or owner_verification_url; the wallet activates once they claim you.',
    };
  }
  const railObjects: StatusResponseT['rails'] = {};
  for (const rail of rails) {
    if (rail.rail_key === 'card_wallet') {
      railObjects.card_wallet = {
        status: row.wallet_status === 'frozen' ? 'frozen' : rail.status,
        balance_usd: microsToUsd(row.visible_micros),
        spending_limits: spendingLimits(row),
      };
    } else if (rail.rail_key === 'partner_wallet' && row.x402_address) {
      railObjects.partner_wallet = {
        status: row.wallet_status === 'frozen' ? 'frozen' : rail.status,
        balance_usd: row.x402_balance_micro === null ? 0 : Number(BigInt(row.x402_balance_micro)) / 1_000_000,
        address: row.x402_address,
        network: row.x402_network ?? undefined,
        balance_read_at: row.x402_balance_read_at ? new Date(row.x402_balance_read_at).toISOString() : null,
      };
    } else {
      railObjects[rail.rail_key] = {
        status: rail.status,
        balance_usd: 0,
        ...(rail.address ? { address: rail.address } : {}),
      };
    }
  }
  return {
    bot_id: row.id,
    bot_name: row.name,
    status,
    default_rail: activeRails.includes('card_wallet') ? 'card_wallet' : (activeRails[0] ?? null),
    active_rails: activeRails,
    rails: railObjects,
    master_guardrails: {
      per_transaction_usd: microsToUsd(row.master_per_transaction_micros ?? 0),
      daily_budget_usd: microsToUsd(row.master_daily_micros ?? 0),
      monthly_budget_usd: microsToUsd(row.master_monthly_micros ?? 0),
    },
    pending_messages: row.pending_messages,
    pending_topups: row.pending_topups,
    webhook_status: row.webhook_status,
    webhook_fail_count: row.webhook_fail_count,
  };
}

/** The wallet-check answer read from the database, with its owner (what the cache keeps). */
export async function computeWallet(
  ctx: AppContext,
  botId: string,
): Promise<{ value: WalletCheckResponseT; ownerId: string | null }> {
  const row = await loadState(ctx, botId);
  return { value: presentWallet(row), ownerId: row.owner_id };
}

/** GET /api/v1/bot/wallet/check, from the state cache when one is given. */
export async function walletCheck(
  ctx: AppContext,
  botId: string,
  cache?: BotStateCache,
): Promise<WalletCheckResponseT> {
  if (!cache) return (await computeWallet(ctx, botId)).value;
  return cache.get('wallet', botId, (id) => computeWallet(ctx, id));
}

function presentWallet(row: BotStateRow): WalletCheckResponseT {
  return {
    wallet_status: row.wallet_status,
    balance_usd: microsToUsd(row.visible_micros),
    card_status: row.active_cards > 0 ? 'active' : 'none',
    spending_limits: spendingLimits(row),
    // Open top-up requests (src/topups/): asked, not yet decided, not expired.
    pending_topups: row.pending_topups,
  };
}
