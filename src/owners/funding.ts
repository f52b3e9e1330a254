import { emitEvent } from '../events/outbox.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne, one, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { microsToUsd, usdText } from '../platform/money.ts';
import { iso } from '../platform/time.ts';
import { fundWallet, MONEY_KINDS, returnDecoyReserve } from '../wallet/ledger.ts';
import { audit } from './audit.ts';
import { ownerIdempotent } from './idempotency.ts';
import { assertOwnedBot, lockOwnedBot } from './locks.ts';

// The owner's side of a bot's wallet: funding, freeze, payment rails and the transaction list.

/** Below this available balance a wallet.balance_low event is emitted (once per crossing). */
export const LOW_BALANCE_MICROS = 5_000_000;

/**
 * Owner funding. Part of the decoy reserve (what decoy purchases took from the bot's visible
 * balance) comes back with it, inside the amount the bot is told it was funded: the part that is
 * decoy spending whichever profile is real (returnableReserve), so what comes back tells the bot
 * nothing it could not work out itself (docs/security.md, "The decoy reserve").
 * With an Idempotency-Key (owners/idempotency.ts) a retry of the same funding replays its answer
 * instead of funding again: an owner who lost the answer can always send it again.
 */
export async function fundBot(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  amountMicros: number,
  idempotencyKey?: string,
) {
  const now = ctx.clock.now();
  return ownerIdempotent(
    ctx,
    {
      ownerId,
      key: idempotencyKey,
      operation: 'wallet.fund',
      request: { bot_id: botId, amount_micros: amountMicros },
    },
    async (tx) => {
      await lockOwnedBot(tx, ownerId, botId);
      return fundLockedBot(tx, { ownerId, botId, amountMicros, now, returnReserve: true });
    },
  );
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
    amountMicros: number;
    now: number;
    returnReserve: boolean;
    details?: Record<string, unknown>;
  },
) {
  const { ownerId, botId, amountMicros, now } = input;
  const reference = newId('fund');
  await fundWallet(tx, botId, amountMicros, now, reference);
  const returned = input.returnReserve ? await returnableReserve(tx, botId) : 0;
  if (returned > 0) await returnDecoyReserve(tx, botId, returned, now, reference);
  const wallet = await one<{ available_micros: number; visible_micros: number; status: string }>(
    tx,
    `SELECT available_micros, available_micros - decoy_spent_micros - decoy_held_micros AS visible_micros, status
         FROM wallets WHERE bot_id = $1`,
    [botId],
  );
  const visibleAmount = amountMicros + returned;
  await emitEvent(tx, {
    botId,
    type: 'wallet.funded',
    data: {
      funding_id: reference,
      amount: microsToUsd(visibleAmount),
      balance: microsToUsd(Number(wallet.visible_micros)),
      description: `Owner added ${usdText(visibleAmount)} to the wallet`,
    },
    at: now,
  });
  await audit(tx, {
    ownerId,
    botId,
    action: 'wallet.funded',
    details: { amount_micros: amountMicros, decoy_reserve_returned_micros: returned, ...input.details },
    at: now,
  });
  return {
    bot_id: botId,
    funding_id: reference,
    amount_usd: microsToUsd(amountMicros),
    decoy_reserve_returned_usd: microsToUsd(returned),
    balance_usd: microsToUsd(Number(wallet.available_micros)),
    bot_visible_balance_usd: microsToUsd(Number(wallet.visible_micros)),
    wallet_status: wallet.status,
  };
}

/**
 * What of the decoy reserve may come back to the bot's visible balance now, in micros.
 *
 * The reserve is what the decoy profiles spent (approved purchases) less what came back before.
 * Returning a share drawn from it told the bot its size, and so, for each guess of the real
 * profile, whether the guess fits: an attacker who assumed round owner amounts read the share as
 * `amount mod $10` and narrowed the six guesses to one within a few fundings. What comes back now
 * is the reserve less, per card, what the real profile spent below the profile that spent most:
 * that is, the profiles' spending less the most any one profile spent, less what came back
 * before. Every guess of the real profile gives the same figure (the bot could compute it from
 * its own purchases), so it says nothing about which is real. What stays behind is, per card,
 * the gap between the top-spending profile and the real one; it comes back as the real profile's
 * spending catches up (docs/security.md, "The decoy reserve").
 */
export async function returnableReserve(
  q: Queryable,
  botId: string,
  options: { lock: boolean } = { lock: true },
): Promise<number> {
  const row = await one<{ decoy_spent_micros: number; held_back: number }>(
    q,
    `SELECT w.decoy_spent_micros,
            (SELECT coalesce(sum(top - real_spent), 0)::bigint FROM (
               SELECT max(p.spent) AS top,
                      coalesce(sum(p.spent) FILTER (WHERE p.profile_index = c.real_profile_index), 0) AS real_spent
                 FROM (SELECT card_id, profile_index, sum(amount_micros) AS spent FROM checkout_confirmations
                        WHERE bot_id = $1 AND rail = 'card_wallet' AND status = 'approved'
                        GROUP BY card_id, profile_index) p
                 JOIN cards c ON c.id = p.card_id
                GROUP BY p.card_id) per_card) AS held_back
       FROM wallets w WHERE w.bot_id = $1${options.lock ? ' FOR UPDATE OF w' : ''}`,
    [botId],
  );
  const reserve = Number(row.decoy_spent_micros);
  return Math.min(reserve, Math.max(0, reserve - Number(row.held_back)));
}

export async function setWalletFrozen(ctx: AppContext, ownerId: string, botId: string, frozen: boolean) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    const wallet = await one<{ status: string }>(
      tx,
      'SELECT status FROM wallets WHERE bot_id = $1 FOR UPDATE',
      [botId],
    );
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
    const activeRails = await announceRailChange(tx, { ownerId, botId, rail: railKey, status, now });
    return { bot_id: botId, rail: railKey, status, active_rails: activeRails };
  });
}

/**
 * After a rail's row changed in `tx`: the bot's active rails, the `rails.updated` event (with the
 * rail's `address` when given) and the audit entry. Used by setRail and the partner wallet's switch.
 */
export async function announceRailChange(
  tx: Queryable,
  change: {
    ownerId: string;
    botId: string;
    rail: 'card_wallet' | 'partner_wallet';
    status: 'active' | 'inactive';
    address?: string | null | undefined;
    now: number;
  },
): Promise<string[]> {
  const { ownerId, botId, rail, status, address, now } = change;
  const rails = await tx.query<{ rail_key: string; status: string }>(
    'SELECT rail_key, status FROM rails WHERE bot_id = $1 ORDER BY rail_key',
    [botId],
  );
  const activeRails = rails.filter((r) => r.status === 'active').map((r) => r.rail_key);
  await emitEvent(tx, {
    botId,
    type: 'rails.updated',
    data: {
      rail,
      status,
      active_rails: activeRails,
      ...(address ? { address } : {}),
      description: `Rail ${rail} is now ${status}`,
    },
    at: now,
  });
  await audit(tx, { ownerId, botId, action: 'rail.updated', details: { rail, status }, at: now });
  return activeRails;
}

export async function listTransactions(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  limit: number,
  before?: string,
) {
  await assertOwnedBot(ctx.db, ownerId, botId);
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
            coalesce(sum(e.amount_micros) FILTER (WHERE e.account = 'wallet_available'), 0)::bigint AS available,
            coalesce(sum(e.amount_micros) FILTER (WHERE e.account = 'wallet_held'), 0)::bigint AS held
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
      available_change_usd: microsToUsd(Number(r.available)),
      held_change_usd: microsToUsd(Number(r.held)),
      created_at: iso(r.created_at),
    })),
  };
}

/**
 * The bot's money movements, newest first, with what was bought (the purchase the ledger
 * transaction references) and the available balance after each. The balance is the running sum of
 * every movement of the available account in one statement, so it agrees with the wallet. The
 * caller has checked that the bot is the owner's (getBot).
 */
export async function listMoneyMovements(ctx: AppContext, botId: string, limit: number, before?: string) {
  const rows = await ctx.db.query<{
    id: string;
    kind: string;
    description: string | null;
    created_at: Date;
    available: number;
    held: number;
    balance_after: number;
    item_name: string | null;
    merchant_name: string | null;
    confirmation_status: string | null;
  }>(
    `WITH moves AS (
       SELECT t.id, t.kind, t.reference, t.description, t.created_at,
              coalesce(sum(e.amount_micros) FILTER (WHERE e.account = 'wallet_available'), 0)::bigint AS available,
              coalesce(sum(e.amount_micros) FILTER (WHERE e.account = 'wallet_held'), 0)::bigint AS held
         FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
        WHERE t.bot_id = $1 AND e.account IN ('wallet_available', 'wallet_held')
        GROUP BY t.id),
     running AS (
       SELECT m.*, (sum(m.available) OVER (ORDER BY m.created_at, m.id ROWS UNBOUNDED PRECEDING))::bigint AS balance_after
         FROM moves m)
     SELECT r.id, r.kind, r.description, r.created_at, r.available, r.held, r.balance_after,
            c.item_name, c.merchant_name, c.status AS confirmation_status
       FROM running r LEFT JOIN checkout_confirmations c ON c.id = r.reference AND c.bot_id = $1
      WHERE r.kind = ANY($4::text[]) AND ($3::timestamptz IS NULL OR r.created_at < $3)
      ORDER BY r.created_at DESC, r.id DESC LIMIT $2`,
    [botId, limit, before ? new Date(before) : null, MONEY_KINDS],
  );
  return rows.map((r) => ({
    id: r.id,
    kind: r.kind,
    description: r.description,
    created_at: iso(r.created_at),
    available_micros: Number(r.available),
    held_micros: Number(r.held),
    balance_after_micros: Number(r.balance_after),
    item_name: r.item_name,
    merchant_name: r.merchant_name,
  }));
}
