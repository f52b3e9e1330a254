import { randomInt } from 'node:crypto';
import { activateWallet } from '../bots/register.ts';
import { statusOf } from '../bots/status.ts';
import { emitEvent } from '../events/outbox.ts';
import type { AppContext } from '../platform/context.ts';
import { randomHex, sha256Hex } from '../platform/crypto.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError, notFound } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { centsToUsd } from '../platform/money.ts';
import { consumeRateLimit, rateLimited } from '../platform/rateLimit.ts';
import { iso, windowStart } from '../platform/time.ts';
import { fundWallet, MONEY_KINDS, returnDecoyReserve } from '../wallet/ledger.ts';

const PAIRING_CODE_TTL_MS = 3600_000;
const PAIRING_CODES_PER_HOUR = 5;
/** Below this available balance a wallet.balance_low event is emitted (once per crossing). */
export const LOW_BALANCE_CENTS = 500;

export async function audit(
  tx: Queryable,
  entry: {
    ownerId: string | null;
    botId?: string | null;
    action: string;
    details?: Record<string, unknown>;
    at: number;
  },
): Promise<void> {
  await tx.query(
    'INSERT INTO audit_log (owner_id, bot_id, action, details, created_at) VALUES ($1,$2,$3,$4,$5)',
    [
      entry.ownerId,
      entry.botId ?? null,
      entry.action,
      JSON.stringify(entry.details ?? {}),
      new Date(entry.at),
    ],
  );
}

/** The bot, locked for update, if it belongs to the owner; otherwise 404 (never 403: no existence leak). */
export async function lockOwnedBot(
  tx: Queryable,
  ownerId: string,
  botId: string,
): Promise<{ id: string; name: string; owner_email: string }> {
  const bot = await maybeOne<{ id: string; name: string; owner_email: string }>(
    tx,
    'SELECT id, name, owner_email FROM bots WHERE id = $1 AND owner_id = $2 FOR UPDATE',
    [botId, ownerId],
  );
  if (!bot) throw notFound('Bot');
  return bot;
}

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
  created_at: Date;
  claimed_at: Date | null;
  wallet_status: string;
  available_cents: number;
  held_cents: number;
  decoy_spent_cents: number;
  decoy_held_cents: number;
  active_rail_count: number;
  pending_approvals: number;
  pending_topups: number;
  [key: string]: unknown;
}

/** The owner's view of bots; `nowParam` is the placeholder of the current time (for open top-ups). */
const ownerBotSql = (nowParam: string) => `
SELECT b.id, b.name, b.description, b.bot_type, b.owner_email, b.callback_url, b.tunnel_hostname,
       b.webhook_status, b.webhook_fail_count, b.created_at, b.claimed_at, b.owner_id,
       w.status AS wallet_status, w.available_cents, w.held_cents, w.decoy_spent_cents, w.decoy_held_cents,
       (SELECT count(*)::int FROM rails r WHERE r.bot_id = b.id AND r.status = 'active') AS active_rail_count,
       (SELECT count(*)::int FROM checkout_confirmations c
         WHERE c.bot_id = b.id AND c.status = 'pending' AND c.is_real) AS pending_approvals,
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
      balance_usd: centsToUsd(row.available_cents),
      held_usd: centsToUsd(row.held_cents),
      // What the bot sees and can spend: the balance less the decoy reserve (decoy purchases lower
      // the bot's balance like real ones; part of the reserve comes back with each funding).
      bot_visible_balance_usd: centsToUsd(
        Number(row.available_cents) - Number(row.decoy_spent_cents) - Number(row.decoy_held_cents),
      ),
      decoy_reserve_usd: centsToUsd(Number(row.decoy_spent_cents) + Number(row.decoy_held_cents)),
    },
    webhook: {
      target: row.callback_url ? 'callback_url' : 'tunnel',
      callback_url: row.callback_url,
      tunnel_hostname: row.tunnel_hostname,
      status: row.webhook_status,
      fail_count: row.webhook_fail_count,
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
  const cards = await ctx.db.query<Record<string, unknown>>(
    `SELECT id, label, status, real_profile_index, per_transaction_cents, daily_cents, monthly_cents,
            approval_mode, approval_threshold_cents, approved_categories, created_at, activated_at
       FROM cards WHERE bot_id = $1 ORDER BY created_at`,
    [botId],
  );
  const rails = await ctx.db.query<{ rail_key: string; status: string; address: string | null }>(
    'SELECT rail_key, status, address FROM rails WHERE bot_id = $1 ORDER BY rail_key',
    [botId],
  );
  return {
    ...presentBot(row),
    rails: rails.map((r) => ({ rail: r.rail_key, status: r.status, address: r.address })),
    cards: cards.map((c) => ({
      card_id: c.id,
      label: c.label,
      status: c.status,
      real_profile_index: c.real_profile_index,
      guardrails: {
        per_transaction_usd: centsToUsd(Number(c.per_transaction_cents)),
        daily_usd: centsToUsd(Number(c.daily_cents)),
        monthly_usd: centsToUsd(Number(c.monthly_cents)),
      },
      approval_mode: c.approval_mode,
      approval_threshold_usd: centsToUsd(Number(c.approval_threshold_cents)),
      approved_categories: c.approved_categories,
      created_at: iso(c.created_at as Date),
      activated_at: c.activated_at ? iso(c.activated_at as Date) : null,
    })),
  };
}

/**
 * Owner funding. A uniformly drawn share of the decoy reserve (what decoy purchases took from the
 * bot's visible balance) comes back with it, inside the amount the bot is told it was funded, so
 * the bot cannot separate the owner's money from returned decoy spending (docs/security.md).
 */
export async function fundBot(ctx: AppContext, ownerId: string, botId: string, amountCents: number) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    return fundLockedBot(tx, { ownerId, botId, amountCents, now, returnReserve: true });
  });
}

/**
 * The funding path, inside the caller's transaction (the bot row already locked by the caller):
 * ledger rows, the decoy-reserve share, `wallet.funded` and the audit row. `returnReserve: false`
 * is for fundings whose amount the bot already knows (an approved top-up request it asked for):
 * a returned share would be readable there as the difference, so none is returned.
 */
export async function fundLockedBot(
  tx: Queryable,
  input: {
    ownerId: string;
    botId: string;
    amountCents: number;
    now: number;
    returnReserve: boolean;
    details?: Record<string, unknown>;
  },
) {
  const { ownerId, botId, amountCents, now } = input;
  const reference = newId('fund');
  await fundWallet(tx, botId, amountCents, now, reference);
  const reserve = (
    await tx.query<{ decoy_spent_cents: number }>(
      'SELECT decoy_spent_cents FROM wallets WHERE bot_id = $1 FOR UPDATE',
      [botId],
    )
  )[0]!;
  const spent = Number(reserve.decoy_spent_cents);
  const returned = input.returnReserve && spent > 0 ? randomInt(spent + 1) : 0;
  if (returned > 0) await returnDecoyReserve(tx, botId, returned, now, reference);
  const wallet = (
    await tx.query<{ available_cents: number; visible_cents: number; status: string }>(
      `SELECT available_cents, available_cents - decoy_spent_cents - decoy_held_cents AS visible_cents, status
         FROM wallets WHERE bot_id = $1`,
      [botId],
    )
  )[0]!;
  const visibleAmount = amountCents + returned;
  await emitEvent(tx, {
    botId,
    type: 'wallet.funded',
    data: {
      funding_id: reference,
      amount: centsToUsd(visibleAmount),
      balance: centsToUsd(Number(wallet.visible_cents)),
      description: `Owner added $${centsToUsd(visibleAmount).toFixed(2)} to the wallet`,
    },
    at: now,
  });
  await audit(tx, {
    ownerId,
    botId,
    action: 'wallet.funded',
    details: { amount_cents: amountCents, decoy_reserve_returned_cents: returned, ...input.details },
    at: now,
  });
  return {
    bot_id: botId,
    funding_id: reference,
    amount_usd: centsToUsd(amountCents),
    decoy_reserve_returned_usd: centsToUsd(returned),
    balance_usd: centsToUsd(Number(wallet.available_cents)),
    bot_visible_balance_usd: centsToUsd(Number(wallet.visible_cents)),
    wallet_status: wallet.status,
  };
}

export async function setWalletFrozen(ctx: AppContext, ownerId: string, botId: string, frozen: boolean) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    const wallet = (
      await tx.query<{ status: string }>('SELECT status FROM wallets WHERE bot_id = $1 FOR UPDATE', [botId])
    )[0]!;
    const target = frozen ? 'frozen' : 'active';
    if (wallet.status !== target) {
      await tx.query('UPDATE wallets SET status = $2, updated_at = $3 WHERE bot_id = $1', [
        botId,
        target,
        new Date(now),
      ]);
      await emitEvent(tx, {
        botId,
        type: frozen ? 'wallet.frozen' : 'wallet.unfrozen',
        data: {
          wallet_status: target,
          description: frozen ? 'Owner froze the wallet' : 'Owner unfroze the wallet',
        },
        at: now,
      });
      await audit(tx, { ownerId, botId, action: frozen ? 'wallet.frozen' : 'wallet.unfrozen', at: now });
    }
    return { bot_id: botId, wallet_status: target };
  });
}

export async function setRail(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  railKey: 'card_wallet' | 'partner_wallet',
  status: 'active' | 'inactive',
  address: string | undefined,
) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    if (railKey === 'partner_wallet' && status === 'active' && !address) {
      const existing = await maybeOne<{ address: string | null }>(
        tx,
        `SELECT address FROM rails WHERE bot_id = $1 AND rail_key = 'partner_wallet'`,
        [botId],
      );
      if (!existing?.address)
        throw new ApiError('validation_error', 'address is required to activate partner_wallet');
    }
    await tx.query(
      `INSERT INTO rails (bot_id, rail_key, status, address, updated_at) VALUES ($1,$2,$3,$4,$5)
       ON CONFLICT (bot_id, rail_key) DO UPDATE
         SET status = EXCLUDED.status, address = coalesce(EXCLUDED.address, rails.address), updated_at = EXCLUDED.updated_at`,
      [botId, railKey, status, address ?? null, new Date(now)],
    );
    const rails = await tx.query<{ rail_key: string; status: string }>(
      'SELECT rail_key, status FROM rails WHERE bot_id = $1 ORDER BY rail_key',
      [botId],
    );
    const activeRails = rails.filter((r) => r.status === 'active').map((r) => r.rail_key);
    await emitEvent(tx, {
      botId,
      type: 'rails.updated',
      data: {
        rail: railKey,
        status,
        active_rails: activeRails,
        description: `Rail ${railKey} is now ${status}`,
      },
      at: now,
    });
    await audit(tx, { ownerId, botId, action: 'rail.updated', details: { rail: railKey, status }, at: now });
    return { bot_id: botId, rail: railKey, status, active_rails: activeRails };
  });
}

export interface MasterGuardrailsInput {
  per_transaction_cents?: number;
  daily_budget_cents?: number;
  monthly_budget_cents?: number;
}

export async function getMasterGuardrails(q: Queryable, ownerId: string, now: number) {
  const row = (
    await q.query<{
      master_per_transaction_cents: number;
      master_daily_cents: number;
      master_monthly_cents: number;
      day_spent: number;
      month_spent: number;
    }>(
      `SELECT master_per_transaction_cents, master_daily_cents, master_monthly_cents,
       coalesce((SELECT spent_cents FROM spend_counters WHERE scope = 'owner:' || o.id AND window_kind = 'day' AND window_start = $2), 0) AS day_spent,
       coalesce((SELECT spent_cents FROM spend_counters WHERE scope = 'owner:' || o.id AND window_kind = 'month' AND window_start = $3), 0) AS month_spent
     FROM owners o WHERE id = $1`,
      [ownerId, windowStart('day', now), windowStart('month', now)],
    )
  )[0]!;
  return {
    per_transaction_usd: centsToUsd(row.master_per_transaction_cents),
    daily_budget_usd: centsToUsd(row.master_daily_cents),
    monthly_budget_usd: centsToUsd(row.master_monthly_cents),
    daily_spent_usd: centsToUsd(row.day_spent),
    monthly_spent_usd: centsToUsd(row.month_spent),
  };
}

export async function updateMasterGuardrails(ctx: AppContext, ownerId: string, input: MasterGuardrailsInput) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await tx.query(
      `UPDATE owners SET
         master_per_transaction_cents = coalesce($2, master_per_transaction_cents),
         master_daily_cents = coalesce($3, master_daily_cents),
         master_monthly_cents = coalesce($4, master_monthly_cents)
       WHERE id = $1`,
      [
        ownerId,
        input.per_transaction_cents ?? null,
        input.daily_budget_cents ?? null,
        input.monthly_budget_cents ?? null,
      ],
    );
    await audit(tx, { ownerId, action: 'master_guardrails.updated', details: { ...input }, at: now });
    return getMasterGuardrails(tx, ownerId, now);
  });
}

export async function listTransactions(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  limit: number,
  before?: string,
) {
  const owned = await maybeOne(ctx.db, 'SELECT 1 AS found FROM bots WHERE id = $1 AND owner_id = $2', [
    botId,
    ownerId,
  ]);
  if (!owned) throw notFound('Bot');
  const rows = await ctx.db.query<{
    id: string;
    kind: string;
    reference: string | null;
    description: string | null;
    created_at: Date;
    available: number;
    held: number;
  }>(
    `SELECT t.id, t.kind, t.reference, t.description, t.created_at,
            coalesce(sum(e.amount_cents) FILTER (WHERE e.account = 'wallet_available'), 0)::bigint AS available,
            coalesce(sum(e.amount_cents) FILTER (WHERE e.account = 'wallet_held'), 0)::bigint AS held
       FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
      WHERE t.bot_id = $1 AND ($3::timestamptz IS NULL OR t.created_at < $3) AND t.kind = ANY($4::text[])
      GROUP BY t.id ORDER BY t.created_at DESC, t.id DESC LIMIT $2`,
    [botId, limit, before ? new Date(before) : null, MONEY_KINDS],
  );
  return {
    transactions: rows.map((r) => ({
      id: r.id,
      kind: r.kind,
      reference: r.reference,
      description: r.description,
      available_change_usd: centsToUsd(Number(r.available)),
      held_change_usd: centsToUsd(Number(r.held)),
      created_at: iso(r.created_at),
    })),
  };
}

export async function listAudit(ctx: AppContext, ownerId: string, botId: string, limit: number) {
  const owned = await maybeOne(ctx.db, 'SELECT 1 AS found FROM bots WHERE id = $1 AND owner_id = $2', [
    botId,
    ownerId,
  ]);
  if (!owned) throw notFound('Bot');
  const rows = await ctx.db.query<{ id: number; action: string; details: unknown; created_at: Date }>(
    'SELECT id, action, details, created_at FROM audit_log WHERE bot_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2',
    [botId, limit],
  );
  return {
    entries: rows.map((r) => ({
      id: Number(r.id),
      action: r.action,
      details: r.details,
      created_at: iso(r.created_at),
    })),
  };
}

/** Issues a new API key (shown once); the old one stops working at once here and within a second elsewhere. */
export async function rotateApiKey(ctx: AppContext, ownerId: string, botId: string) {
  const now = ctx.clock.now();
  const apiKey = `svc_live_${randomHex(24)}`;
  await ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    await tx.query('UPDATE bots SET api_key_hash = $2, api_key_prefix = $3 WHERE id = $1', [
      botId,
      sha256Hex(apiKey),
      apiKey.slice(0, 13),
    ]);
    await audit(tx, { ownerId, botId, action: 'api_key.rotated', at: now });
  });
  return { bot_id: botId, api_key: apiKey, note: 'Shown once. The previous key no longer works.' };
}

/** Issues a new webhook secret (shown once); deliveries created from now on are signed with it. */
export async function rotateWebhookSecret(ctx: AppContext, ownerId: string, botId: string) {
  const now = ctx.clock.now();
  const secret = `whsec_${randomHex(24)}`;
  const previousValidUntil = await ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    // The secret being replaced keeps signing (Standard Webhooks header) until the overlap ends,
    // so the bot can switch without missing a delivery. A second rotation inside the window
    // replaces the previous secret: only the last two secrets ever sign.
    const overlapUntil = new Date(now + ctx.config.webhookSecretOverlapSeconds * 1000);
    await tx.query(
      `UPDATE bots SET webhook_secret_prev_enc = webhook_secret_enc, webhook_secret_prev_until = $3,
              webhook_secret_enc = $2
        WHERE id = $1`,
      [botId, ctx.secrets.encrypt(secret), overlapUntil],
    );
    await audit(tx, { ownerId, botId, action: 'webhook_secret.rotated', at: now });
    return overlapUntil;
  });
  return {
    bot_id: botId,
    webhook_secret: secret,
    previous_secret_valid_until: previousValidUntil.toISOString(),
    note: 'Shown once. Give it to your bot to verify signatures; deliveries are signed with the previous secret too (webhook-signature) until previous_secret_valid_until.',
  };
}
