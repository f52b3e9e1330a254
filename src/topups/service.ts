import { emitEvent } from '../events/outbox.ts';
import { sendOwnerMailSoon } from '../notifications/job.ts';
import { audit } from '../owners/audit.ts';
import { fundLockedBot } from '../owners/funding.ts';
import { lockOwnedBot } from '../owners/locks.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne, one, type Queryable } from '../platform/db/port.ts';
import { ApiError, notFound } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { centsToMicros, microsToUsd, usdText } from '../platform/money.ts';
import { consumeRateLimit, tooMany } from '../platform/rateLimit.ts';
import { iso } from '../platform/time.ts';
import { present } from '../platform/present.ts';
import { displayText } from '../platform/text.ts';
import { ownerIdempotent } from '../owners/idempotency.ts';

// Top-up requests: a bot asks its owner for funds (amount, reason); the owner approves, which funds
// the card wallet through the owner funding path in the same transaction, or declines. A request
// is decided once (the row is locked and must still be pending: 409 not_pending otherwise) and
// expires unanswered after TOPUP_TTL_MS. Asking is limited per bot: requests per rolling day
// (every ask that passes validation counts, refused ones included) and requests open at once.

/** An unanswered request expires after 7 days (the owner may be away for a weekend). */
export const TOPUP_TTL_MS = 7 * 86_400_000;
export const REASON_MAX = 500;
export const NOTE_MAX = 500;

export type TopupStatus = 'pending' | 'approved' | 'declined' | 'expired';

export interface TopupRow {
  id: string;
  bot_id: string;
  owner_id: string;
  amount_micros: number;
  reason: string;
  status: TopupStatus;
  approved_micros: number | null;
  funding_id: string | null;
  note: string | null;
  created_at: Date;
  expires_at: Date;
  decided_at: Date | null;
  decided_by: string | null;
  [key: string]: unknown;
}

/** A pending request past its expiry is reported as expired even before the job has written it. */
function effectiveStatus(row: TopupRow, now: number): TopupStatus {
  return row.status === 'pending' && new Date(row.expires_at).getTime() <= now ? 'expired' : row.status;
}

/** The bot's view of one request. */
export function presentForBot(row: TopupRow, now: number) {
  const status = effectiveStatus(row, now);
  return {
    topup_id: row.id,
    status,
    amount_usd: microsToUsd(Number(row.amount_micros)),
    reason: row.reason,
    ...(row.approved_micros !== null
      ? { approved_amount_usd: microsToUsd(Number(row.approved_micros)) }
      : {}),
    ...(row.note !== null ? { note: row.note } : {}),
    created_at: iso(row.created_at),
    expires_at: iso(row.expires_at),
    decided_at: row.decided_at ? iso(row.decided_at) : null,
  };
}

const OPEN_SQL = `status = 'pending' AND expires_at > $2`;

type AskOutcome = { kind: 'created' | 'duplicate'; row: TopupRow } | { kind: 'refused'; error: ApiError };

/**
 * POST /api/v1/bot/wallet/topup-requests. The ask is counted first, in the same transaction, behind
 * the limiter's per-key lock: parallel asks cannot all pass a check made before any was counted. A
 * refusal is returned as a value so the transaction commits with its count, then thrown.
 */
export async function requestTopup(
  ctx: AppContext,
  botId: string,
  input: { amount_cents: number; reason: string },
) {
  const reason = displayText(input.reason, 'reason', REASON_MAX);
  const amountMicros = centsToMicros(input.amount_cents);
  const now = ctx.clock.now();
  const outcome = await ctx.db.transaction(async (tx): Promise<AskOutcome> => {
    const limited = await consumeRateLimit(tx, {
      key: `topup-requests:${botId}`,
      limit: ctx.config.topupRequestsPerDay,
      windowSeconds: 86_400,
      now,
    });
    if (!limited.ok) {
      return {
        kind: 'refused',
        error: tooMany(
          limited.retryAfterSeconds,
          `top-up requests (at most ${ctx.config.topupRequestsPerDay} a day)`,
        ),
      };
    }
    const bot = await maybeOne<{ owner_id: string | null; wallet_status: string }>(
      tx,
      'SELECT b.owner_id, w.status AS wallet_status FROM bots b JOIN wallets w ON w.bot_id = b.id WHERE b.id = $1',
      [botId],
    );
    if (!bot || bot.owner_id === null || bot.wallet_status === 'pending') {
      return {
        kind: 'refused',
        error: new ApiError(
          'wallet_not_active',
          'The wallet is not active: your owner has not claimed you yet.',
        ),
      };
    }
    if (bot.wallet_status === 'frozen') {
      return { kind: 'refused', error: new ApiError('wallet_frozen', 'The wallet is frozen by the owner.') };
    }
    // One bot's asks in a row (the open count and the insert), whichever instance serves them.
    await tx.query(`SELECT pg_advisory_xact_lock(hashtext('topups:' || $1::text))`, [botId]);
    const open = await tx.query<TopupRow>(
      `SELECT * FROM topup_requests WHERE bot_id = $1 AND ${OPEN_SQL} ORDER BY created_at`,
      [botId, new Date(now)],
    );
    // Asking again for the same amount and reason while that request is open (a retry after a lost
    // answer, a loop) returns the open request instead of a second one for the owner to decide.
    const same = open.find((r) => Number(r.amount_micros) === amountMicros && r.reason === reason);
    if (same) return { kind: 'duplicate', row: same };
    if (open.length >= ctx.config.topupRequestsOpenMax) {
      const oldest = new Date(present(open[0], 'the oldest open request').expires_at).getTime();
      const retry = Math.max(1, Math.ceil((oldest - now) / 1000));
      return {
        kind: 'refused',
        error: tooMany(
          retry,
          `open top-up requests (at most ${ctx.config.topupRequestsOpenMax} waiting for your owner)`,
        ),
      };
    }
    const row = await one<TopupRow>(
      tx,
      `INSERT INTO topup_requests (id, bot_id, owner_id, amount_micros, reason, status, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7) RETURNING *`,
      [
        newId('topup'),
        botId,
        bot.owner_id,
        amountMicros,
        reason,
        new Date(now),
        new Date(now + TOPUP_TTL_MS),
      ],
    );
    await emitEvent(tx, {
      botId,
      type: 'wallet.topup_requested',
      data: {
        topup_id: row.id,
        amount: microsToUsd(amountMicros),
        reason,
        expires_at: iso(row.expires_at),
        description: `Asked the owner for ${usdText(amountMicros)}`,
      },
      at: now,
    });
    return { kind: 'created', row };
  });
  if (outcome.kind === 'refused') throw outcome.error;
  if (outcome.kind === 'created') {
    // The owner's mail is due from the row just committed; the owner-mail job retries what this misses.
    sendOwnerMailSoon(ctx);
  }
  return {
    statusCode: outcome.kind === 'created' ? (201 as const) : (200 as const),
    body: {
      ...presentForBot(outcome.row, now),
      message:
        outcome.kind === 'created'
          ? 'Your owner has been asked. Watch for wallet.topup_approved or wallet.topup_declined, or list your requests.'
          : 'A request for this amount and reason is already waiting for your owner; this is that request.',
    },
  };
}

/** GET /api/v1/bot/wallet/topup-requests: the bot's own requests, newest first (paged with `before`). */
export async function listBotTopups(
  ctx: AppContext,
  botId: string,
  page: { limit?: number; before?: string } = {},
) {
  const now = ctx.clock.now();
  const rows = await ctx.db.query<TopupRow>(
    `SELECT * FROM topup_requests WHERE bot_id = $1 AND ($3::timestamptz IS NULL OR created_at < $3)
      ORDER BY created_at DESC, id DESC LIMIT $2`,
    [botId, page.limit ?? 50, page.before ? new Date(page.before) : null],
  );
  return { topup_requests: rows.map((r) => presentForBot(r, now)) };
}

/** SQL for the number of a bot's open requests (pending_topups in status and wallet check). */
export function openTopupsSql(botIdExpr: string, nowParam: string): string {
  return `(SELECT count(*)::int FROM topup_requests t WHERE t.bot_id = ${botIdExpr} AND t.status = 'pending' AND t.expires_at > ${nowParam})`;
}

function presentForOwner(row: TopupRow & { bot_name: string }, now: number) {
  return {
    topup_id: row.id,
    bot_id: row.bot_id,
    bot_name: row.bot_name,
    status: effectiveStatus(row, now),
    amount_usd: microsToUsd(Number(row.amount_micros)),
    reason: row.reason,
    approved_amount_usd: row.approved_micros === null ? null : microsToUsd(Number(row.approved_micros)),
    funding_id: row.funding_id,
    note: row.note,
    created_at: iso(row.created_at),
    expires_at: iso(row.expires_at),
    decided_at: row.decided_at ? iso(row.decided_at) : null,
  };
}

/** The owner's requests (all bots), open ones by default. */
export async function listOwnerTopups(
  ctx: AppContext,
  ownerId: string,
  options: { status?: TopupStatus | 'all'; limit?: number; before?: string } = {},
) {
  const now = ctx.clock.now();
  const status = options.status ?? 'pending';
  // $3 is the current time: every filter names it (an unused parameter has no type in PostgreSQL).
  const FILTERS: Record<TopupStatus | 'all', string> = {
    all: '$3::timestamptz IS NOT NULL',
    pending: `t.status = 'pending' AND t.expires_at > $3`,
    expired: `(t.status = 'expired' OR (t.status = 'pending' AND t.expires_at <= $3))`,
    approved: `t.status = 'approved' AND $3::timestamptz IS NOT NULL`,
    declined: `t.status = 'declined' AND $3::timestamptz IS NOT NULL`,
  };
  const filter = FILTERS[status];
  const rows = await ctx.db.query<TopupRow & { bot_name: string }>(
    `SELECT t.*, b.name AS bot_name FROM topup_requests t JOIN bots b ON b.id = t.bot_id
      WHERE t.owner_id = $1 AND b.owner_id = $1 AND ${filter}
        AND ($4::timestamptz IS NULL OR t.created_at < $4)
      ORDER BY ${status === 'pending' ? 't.created_at' : 't.created_at DESC'}, t.id LIMIT $2`,
    [ownerId, options.limit ?? 100, new Date(now), options.before ? new Date(options.before) : null],
  );
  return { topup_requests: rows.map((r) => presentForOwner(r, now)) };
}

/** The request, locked, if it belongs to one of the owner's bots; otherwise 404. */
async function lockOwnedTopup(
  tx: Queryable,
  ownerId: string,
  topupId: string,
): Promise<TopupRow & { bot_name: string }> {
  const row = await maybeOne<TopupRow & { bot_name: string }>(
    tx,
    `SELECT t.*, b.name AS bot_name FROM topup_requests t JOIN bots b ON b.id = t.bot_id
      WHERE t.id = $1 AND t.owner_id = $2 AND b.owner_id = $2 FOR UPDATE OF t`,
    [topupId, ownerId],
  );
  if (!row) throw notFound('Top-up request');
  return row;
}

/** Writes the expiry of a locked, pending, due request with its event. */
async function expireLocked(tx: Queryable, row: TopupRow, now: number): Promise<void> {
  await tx.query(
    `UPDATE topup_requests SET status = 'expired', decided_at = $2, decided_by = 'expiry' WHERE id = $1`,
    [row.id, new Date(now)],
  );
  await emitEvent(tx, {
    botId: row.bot_id,
    type: 'wallet.topup_expired',
    data: {
      topup_id: row.id,
      amount: microsToUsd(Number(row.amount_micros)),
      description: 'Your owner did not answer the top-up request in time; it expired.',
    },
    at: now,
  });
}

type Decision = { approve: true; amountMicros?: number } | { approve: false; note?: string };

/**
 * The owner approves (funds the wallet with the asked amount or the amount given) or declines (with
 * an optional note the bot sees). Decided once: 409 not_pending when no longer pending.
 */
export async function decideTopup(
  ctx: AppContext,
  ownerId: string,
  topupId: string,
  decision: Decision,
  idempotencyKey?: string,
) {
  const note =
    !decision.approve && decision.note !== undefined ? displayText(decision.note, 'note', NOTE_MAX) : null;
  const now = ctx.clock.now();
  // With an Idempotency-Key (owners/idempotency.ts), a retry of the same decision replays its answer
  // rather than 409 not_pending: an owner who lost the answer learns what was decided.
  const request = decision.approve
    ? { topup_id: topupId, approve: true, amount_micros: decision.amountMicros }
    : { topup_id: topupId, approve: false, note: decision.note };
  const result = await ownerIdempotent(
    ctx,
    { ownerId, key: idempotencyKey, operation: 'topup.decide', request },
    (tx) => decideLocked(tx, ownerId, topupId, decision, note, now),
    (outcome) => outcome.decided,
  );
  if (!result.decided) {
    throw new ApiError('not_pending', `The top-up request is no longer pending (it is ${result.status}).`, {
      status: result.status,
    });
  }
  return result.answer;
}

/** The decision inside its transaction: the answer, or why the request was not decided. */
async function decideLocked(
  tx: Queryable,
  ownerId: string,
  topupId: string,
  decision: Decision,
  note: string | null,
  now: number,
) {
  const row = await lockOwnedTopup(tx, ownerId, topupId);
  if (row.status !== 'pending') return { decided: false as const, status: row.status };
  if (new Date(row.expires_at).getTime() <= now) {
    await expireLocked(tx, row, now);
    return { decided: false as const, status: 'expired' as const };
  }
  if (decision.approve) {
    const amount = decision.amountMicros ?? Number(row.amount_micros);
    await lockOwnedBot(tx, ownerId, row.bot_id);
    // The owner funding path (ledger, wallet.funded, audit). No decoy-reserve share comes back
    // here: the bot knows what it asked for, so a share would be readable as the difference
    // (docs/security.md); direct fundings, whose amount the bot does not know, return it.
    const funding = await fundLockedBot(tx, {
      ownerId,
      botId: row.bot_id,
      amountMicros: amount,
      now,
      returnReserve: false,
      details: { topup_id: row.id },
    });
    await tx.query(
      `UPDATE topup_requests SET status = 'approved', approved_micros = $2, funding_id = $3, decided_at = $4, decided_by = 'owner'
          WHERE id = $1`,
      [row.id, amount, funding.funding_id, new Date(now)],
    );
    await emitEvent(tx, {
      botId: row.bot_id,
      type: 'wallet.topup_approved',
      data: {
        topup_id: row.id,
        amount: microsToUsd(Number(row.amount_micros)),
        approved_amount: microsToUsd(amount),
        funding_id: funding.funding_id,
        balance: funding.bot_visible_balance_usd,
        description: `Owner approved the top-up request: ${usdText(amount)} added to the wallet`,
      },
      at: now,
    });
    await audit(tx, {
      ownerId,
      botId: row.bot_id,
      action: 'topup.approved',
      details: { topup_id: row.id, amount_micros: Number(row.amount_micros), approved_micros: amount },
      at: now,
    });
    return {
      decided: true as const,
      answer: {
        ...decisionCommon(row, topupId, now),
        status: 'approved' as const,
        approved_amount_usd: microsToUsd(amount),
        funding_id: funding.funding_id,
        balance_usd: funding.balance_usd,
        bot_visible_balance_usd: funding.bot_visible_balance_usd,
      },
    };
  }
  await tx.query(
    `UPDATE topup_requests SET status = 'declined', note = $2, decided_at = $3, decided_by = 'owner' WHERE id = $1`,
    [row.id, note, new Date(now)],
  );
  await emitEvent(tx, {
    botId: row.bot_id,
    type: 'wallet.topup_declined',
    data: {
      topup_id: row.id,
      amount: microsToUsd(Number(row.amount_micros)),
      ...(note !== null ? { note } : {}),
      description: 'Owner declined the top-up request',
    },
    at: now,
  });
  await audit(tx, {
    ownerId,
    botId: row.bot_id,
    action: 'topup.declined',
    details: {
      topup_id: row.id,
      amount_micros: Number(row.amount_micros),
      ...(note !== null ? { note } : {}),
    },
    at: now,
  });
  return {
    decided: true as const,
    answer: { ...decisionCommon(row, topupId, now), status: 'declined' as const, note },
  };
}

function decisionCommon(row: TopupRow, topupId: string, now: number) {
  return {
    topup_id: topupId,
    bot_id: row.bot_id,
    amount_usd: microsToUsd(Number(row.amount_micros)),
    decided_at: iso(now),
  };
}

/** Expires due requests, one per transaction, claimed with SKIP LOCKED (safe on several instances). */
export async function expireDueTopups(ctx: AppContext, max = 500): Promise<number> {
  let done = 0;
  while (done < max) {
    const now = ctx.clock.now();
    const expired = await ctx.db.transaction(async (tx) => {
      const row = await maybeOne<TopupRow>(
        tx,
        `SELECT * FROM topup_requests WHERE status = 'pending' AND expires_at <= $1
          ORDER BY expires_at LIMIT 1 FOR UPDATE SKIP LOCKED`,
        [new Date(now)],
      );
      if (!row) return false;
      await expireLocked(tx, row, now);
      return true;
    });
    if (!expired) break;
    done++;
  }
  return done;
}
