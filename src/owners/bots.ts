import { randomInt } from 'node:crypto';
import { activateWallet } from '../bots/register.ts';
import { statusOf } from '../bots/status.ts';
import type { AppContext } from '../platform/context.ts';
import { sha256Hex } from '../platform/crypto.ts';
import { maybeOne } from '../platform/db/port.ts';
import { ApiError, notFound } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { microsToUsd } from '../platform/money.ts';
import { consumeRateLimit, rateLimited } from '../platform/rateLimit.ts';
import { iso } from '../platform/time.ts';
import { audit } from './audit.ts';
import { returnableReserve } from './funding.ts';

// The owner's bots: claim with a claim token, pairing codes, the list and one bot's detail.

const PAIRING_CODE_TTL_MS = 3600_000;
const PAIRING_CODES_PER_HOUR = 5;

export async function claimBot(ctx: AppContext, ownerId: string, claimToken: string) {
  const now = ctx.clock.now();
  const bot = await ctx.db.transaction(async (tx) => {
    const row = await maybeOne<{ id: string; name: string; owner_email: string }>(
      tx,
      'SELECT id, name, owner_email FROM bots WHERE claim_token_hash = $1 AND owner_id IS NULL FOR UPDATE',
      [sha256Hex(claimToken.trim())],
    );
    if (!row) throw new ApiError('invalid_claim_token', 'The claim token is invalid or was already used.');
    // The token is single use: its hash is cleared as the bot changes hands.
    await tx.query('UPDATE bots SET owner_id = $2, claimed_at = $3, claim_token_hash = NULL WHERE id = $1', [
      row.id,
      ownerId,
      new Date(now),
    ]);
    await activateWallet(tx, row.id, ownerId, now, 'claimed');
    await audit(tx, { ownerId, botId: row.id, action: 'bot.claimed', at: now });
    return row;
  });
  ctx.mailer
    .send({
      to: bot.owner_email,
      subject: `Your bot "${bot.name}" was claimed`,
      text: `The bot "${bot.name}" (${bot.id}) was claimed at ${iso(now)} and its wallet is now active.\nIf this was not you, contact the service operator.`,
    })
    .catch(() => {});
  return { bot_id: bot.id, status: 'active' as const };
}

export async function createPairingCode(ctx: AppContext, ownerId: string) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    const limited = await consumeRateLimit(tx, {
      key: `pairing-codes:${ownerId}`,
      limit: PAIRING_CODES_PER_HOUR,
      windowSeconds: 3600,
      now,
    });
    if (!limited.ok) {
      throw rateLimited(
        limited.retryAfterSeconds,
        `At most ${PAIRING_CODES_PER_HOUR} pairing codes per hour.`,
      );
    }
    for (let attempt = 0; attempt < 20; attempt++) {
      const code = String(randomInt(0, 1_000_000)).padStart(6, '0');
      const hash = ctx.secrets.keyedHash(code);
      // An expired, unused code with the same digits frees its place.
      await tx.query(
        'DELETE FROM pairing_codes WHERE code_hash = $1 AND used_at IS NULL AND expires_at <= $2',
        [hash, new Date(now)],
      );
      const inserted = await tx.query(
        `INSERT INTO pairing_codes (id, owner_id, code_hash, expires_at, created_at) VALUES ($1,$2,$3,$4,$5)
         ON CONFLICT (code_hash) WHERE used_at IS NULL DO NOTHING RETURNING id`,
        [newId('pair'), ownerId, hash, new Date(now + PAIRING_CODE_TTL_MS), new Date(now)],
      );
      if (inserted.length === 1) {
        await audit(tx, { ownerId, action: 'pairing_code.created', at: now });
        return { pairing_code: code, expires_at: iso(now + PAIRING_CODE_TTL_MS) };
      }
    }
    throw new Error('could not allocate a pairing code');
  });
}

interface OwnerBotRow {
  id: string;
  name: string;
  description: string | null;
  bot_type: string;
  owner_email: string;
  callback_url: string | null;
  tunnel_hostname: string | null;
  webhook_status: string;
  webhook_fail_count: number;
  tunnel_connected_at: Date | null;
  created_at: Date;
  claimed_at: Date | null;
  wallet_status: string;
  available_micros: number;
  held_micros: number;
  decoy_spent_micros: number;
  decoy_held_micros: number;
  active_rail_count: number;
  pending_approvals: number;
  pending_topups: number;
  [key: string]: unknown;
}

/** The owner's view of bots; `nowParam` is the placeholder of the current time (for open top-ups). */
const ownerBotSql = (nowParam: string) => `
SELECT b.id, b.name, b.description, b.bot_type, b.owner_email, b.callback_url, b.tunnel_hostname,
       b.webhook_status, b.webhook_fail_count, b.tunnel_connected_at, b.created_at, b.claimed_at, b.owner_id,
       w.status AS wallet_status, w.available_micros, w.held_micros, w.decoy_spent_micros, w.decoy_held_micros,
       (SELECT count(*)::int FROM rails r WHERE r.bot_id = b.id AND r.status = 'active') AS active_rail_count,
       (SELECT count(*)::int FROM checkout_confirmations c
         WHERE c.bot_id = b.id AND c.status = 'pending' AND c.expires_at IS NOT NULL) AS pending_approvals,
       (SELECT count(*)::int FROM topup_requests t
         WHERE t.bot_id = b.id AND t.status = 'pending' AND t.expires_at > ${nowParam}) AS pending_topups
  FROM bots b JOIN wallets w ON w.bot_id = b.id`;

function presentBot(row: OwnerBotRow) {
  return {
    bot_id: row.id,
    bot_name: row.name,
    description: row.description,
    bot_type: row.bot_type,
    owner_email: row.owner_email,
    status: statusOf({
      owner_id: 'owned',
      wallet_status: row.wallet_status,
      active_rail_count: row.active_rail_count,
    }),
    wallet: {
      status: row.wallet_status,
      balance_usd: microsToUsd(row.available_micros),
      held_usd: microsToUsd(row.held_micros),
      // What the bot sees and can spend: the balance less the decoy reserve (decoy purchases lower
      // the bot's balance like real ones; part of the reserve comes back with each funding).
      bot_visible_balance_usd: microsToUsd(
        Number(row.available_micros) - Number(row.decoy_spent_micros) - Number(row.decoy_held_micros),
      ),
      decoy_reserve_usd: microsToUsd(Number(row.decoy_spent_micros) + Number(row.decoy_held_micros)),
    },
    webhook: {
      target: row.callback_url ? ('callback_url' as const) : ('tunnel' as const),
      callback_url: row.callback_url,
      tunnel_hostname: row.tunnel_hostname,
      status: row.webhook_status,
      fail_count: row.webhook_fail_count,
      // A managed-tunnel bot whose tunnel client never connected: its deliveries wait for it
      // (src/webhooks/tunnelWait.ts); the status stays `pending` and nothing counts as failed.
      waiting_for_tunnel: row.tunnel_hostname !== null && row.tunnel_connected_at === null,
    },
    pending_approvals: row.pending_approvals,
    pending_topups: row.pending_topups,
    created_at: iso(row.created_at),
    claimed_at: row.claimed_at ? iso(row.claimed_at) : null,
  };
}

export async function listBots(ctx: AppContext, ownerId: string) {
  const rows = await ctx.db.query<OwnerBotRow>(
    `${ownerBotSql('$2')} WHERE b.owner_id = $1 ORDER BY b.created_at`,
    [ownerId, new Date(ctx.clock.now())],
  );
  return { bots: rows.map(presentBot) };
}

export async function getBot(ctx: AppContext, ownerId: string, botId: string) {
  const row = await maybeOne<OwnerBotRow>(
    ctx.db,
    `${ownerBotSql('$3')} WHERE b.id = $1 AND b.owner_id = $2`,
    [botId, ownerId, new Date(ctx.clock.now())],
  );
  if (!row) throw notFound('Bot');
  const cards = await ctx.db.query<{
    id: string;
    label: string | null;
    status: string;
    real_profile_index: number;
    per_transaction_micros: number;
    daily_micros: number;
    monthly_micros: number;
    approval_mode: string;
    approval_threshold_micros: number;
    approved_categories: string[];
    created_at: Date;
    activated_at: Date | null;
  }>(
    `SELECT id, label, status, real_profile_index, per_transaction_micros, daily_micros, monthly_micros,
            approval_mode, approval_threshold_micros, approved_categories, created_at, activated_at
       FROM cards WHERE bot_id = $1 ORDER BY created_at`,
    [botId],
  );
  const rails = await ctx.db.query<{ rail_key: string; status: string; address: string | null }>(
    'SELECT rail_key, status, address FROM rails WHERE bot_id = $1 ORDER BY rail_key',
    [botId],
  );
  const bot = presentBot(row);
  return {
    ...bot,
    wallet: {
      ...bot.wallet,
      // What of the decoy reserve the next funding gives back (owners/funding.ts returnableReserve).
      decoy_reserve_returnable_usd: microsToUsd(await returnableReserve(ctx.db, botId, { lock: false })),
    },
    rails: rails.map((r) => ({ rail: r.rail_key, status: r.status, address: r.address })),
    cards: cards.map((c) => ({
      card_id: c.id,
      label: c.label,
      status: c.status,
      real_profile_index: c.real_profile_index,
      guardrails: {
        per_transaction_usd: microsToUsd(Number(c.per_transaction_micros)),
        daily_usd: microsToUsd(Number(c.daily_micros)),
        monthly_usd: microsToUsd(Number(c.monthly_micros)),
      },
      approval_mode: c.approval_mode,
      approval_threshold_usd: microsToUsd(Number(c.approval_threshold_micros)),
      approved_categories: c.approved_categories,
      created_at: iso(c.created_at),
      activated_at: c.activated_at ? iso(c.activated_at) : null,
    })),
  };
}

// Reads for the dashboard's pages, which run no SQL of their own.

/** The bot a claim token names while it is unclaimed (the claim page's confirmation); else undefined. */
export async function findUnclaimedBot(ctx: AppContext, claimToken: string) {
  const bot = await maybeOne<{
    id: string;
    name: string;
    description: string | null;
    owner_email: string;
    created_at: Date;
  }>(
    ctx.db,
    'SELECT id, name, description, owner_email, created_at FROM bots WHERE claim_token_hash = $1 AND owner_id IS NULL',
    [sha256Hex(claimToken)],
  );
  return bot && { ...bot, created_at: iso(bot.created_at) };
}

/** The owner's latest pairing codes (no code, only when and by which of their bots it was used). */
export async function listRecentPairingCodes(ctx: AppContext, ownerId: string, limit: number) {
  const rows = await ctx.db.query<{
    created_at: Date;
    expires_at: Date;
    used_at: Date | null;
    bot_id: string | null;
    bot_name: string | null;
  }>(
    `SELECT p.created_at, p.expires_at, p.used_at, b.id AS bot_id, b.name AS bot_name
       FROM pairing_codes p LEFT JOIN bots b ON b.id = p.used_by_bot_id AND b.owner_id = p.owner_id
      WHERE p.owner_id = $1 ORDER BY p.created_at DESC LIMIT $2`,
    [ownerId, limit],
  );
  return rows.map((r) => ({
    created_at: iso(r.created_at),
    expires_at: iso(r.expires_at),
    used_at: r.used_at ? iso(r.used_at) : null,
    bot_id: r.bot_id,
    bot_name: r.bot_name,
  }));
}
