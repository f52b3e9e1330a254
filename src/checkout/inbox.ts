import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { iso } from '../platform/time.ts';

// Reads of the owner's approvals inbox for the dashboard (src/dashboard/approvalPages.ts; the
// inbox's pending list is listApprovals in decisions.ts). Every held purchase, on any profile: the
// owner decides the purchase, and nothing here says which profile is real (docs/security.md).

/**
 * What waits for the owner's decision in the inbox (the navigation badge): real purchases and
 * top-up requests, pending and not yet expired — what the inbox lists.
 */
export async function pendingApprovalCount(ctx: AppContext, ownerId: string): Promise<number> {
  const row = await maybeOne<{ n: number }>(
    ctx.db,
    `SELECT (SELECT count(*) FROM checkout_confirmations c JOIN bots b ON b.id = c.bot_id
              WHERE c.owner_id = $1 AND b.owner_id = $1 AND c.status = 'pending'
                AND c.expires_at > $2)::int
          + (SELECT count(*) FROM topup_requests t JOIN bots b ON b.id = t.bot_id
              WHERE t.owner_id = $1 AND b.owner_id = $1 AND t.status = 'pending' AND t.expires_at > $2)::int AS n`,
    [ownerId, new Date(ctx.clock.now())],
  );
  return Number(row?.n ?? 0);
}

/**
 * What the owner's approvals were in the last 7 days, latest decision first: held purchases decided
 * (or expired) and top-up requests approved, declined or expired (decided within the 7 days: a
 * request may stay open for 7 days). A top-up request past its expiry
 * that the job has not written yet counts as expired at its expiry time, as the bot is told.
 */
export async function listRecentDecisions(ctx: AppContext, ownerId: string, limit: number) {
  const now = ctx.clock.now();
  const rows = await ctx.db.query<{
    kind: 'purchase' | 'topup';
    id: string;
    bot_id: string;
    bot_name: string;
    amount_micros: number;
    merchant_name: string | null;
    item_name: string;
    status: string;
    decided_at: Date | null;
    decided_by: string | null;
  }>(
    `SELECT * FROM (
       SELECT 'purchase' AS kind, c.id, c.bot_id, b.name AS bot_name, c.amount_micros, c.merchant_name,
              c.item_name, c.status, c.decided_at, c.decided_by
         FROM checkout_confirmations c JOIN bots b ON b.id = c.bot_id
        WHERE c.owner_id = $1 AND b.owner_id = $1 AND c.status <> 'pending' AND c.expires_at IS NOT NULL
          AND c.created_at > $2
       UNION ALL
       SELECT 'topup' AS kind, t.id, t.bot_id, b.name AS bot_name, COALESCE(t.approved_micros, t.amount_micros),
              NULL, t.reason,
              CASE WHEN t.status = 'pending' THEN 'expired' ELSE t.status END,
              CASE WHEN t.status = 'pending' THEN t.expires_at ELSE t.decided_at END,
              CASE WHEN t.status = 'pending' THEN 'expiry' ELSE t.decided_by END
         FROM topup_requests t JOIN bots b ON b.id = t.bot_id
        WHERE t.owner_id = $1 AND b.owner_id = $1 AND COALESCE(t.decided_at, t.expires_at) > $2
          AND (t.status <> 'pending' OR t.expires_at <= $4)
     ) d
      ORDER BY d.decided_at DESC NULLS LAST, d.id LIMIT $3`,
    [ownerId, new Date(now - 7 * 86_400_000), limit, new Date(now)],
  );
  return rows.map((r) => ({
    ...r,
    amount_micros: Number(r.amount_micros),
    decided_at: r.decided_at ? iso(r.decided_at) : null,
  }));
}

/** The held purchase a one-click e-mail link names, with its owner (whose key signed the link). */
export async function findOneClickTarget(ctx: AppContext, confirmationId: string) {
  const row = await maybeOne<{
    id: string;
    owner_id: string;
    bot_name: string;
    amount_micros: number;
    merchant_name: string;
    merchant_url: string;
    item_name: string;
    category: string | null;
    status: string;
    expires_at: Date | null;
  }>(
    ctx.db,
    `SELECT c.id, c.owner_id, b.name AS bot_name, c.amount_micros, c.merchant_name, c.merchant_url,
            c.item_name, c.category, c.status, c.expires_at
       FROM checkout_confirmations c JOIN bots b ON b.id = c.bot_id AND b.owner_id = c.owner_id
      WHERE c.id = $1`,
    [confirmationId],
  );
  return (
    row && {
      ...row,
      amount_micros: Number(row.amount_micros),
      expires_at: row.expires_at ? iso(row.expires_at) : null,
    }
  );
}

export type OneClickTarget = NonNullable<Awaited<ReturnType<typeof findOneClickTarget>>>;
