import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { notFound } from '../platform/errors.ts';
import { iso } from '../platform/time.ts';
import { isTunnelWait } from './tunnelWait.ts';

// The owner's webhook delivery log as the dashboard shows it (src/dashboard/webhookPages.ts): one
// row per delivery with the payload that was sent, filtered by status or "retrying" (pending after
// a failed attempt), paged by creation time. The owner API's list is listDeliveries in service.ts.

export type DeliveryFilter = 'retrying' | 'pending' | 'delivered' | 'failed' | 'acked';

/** The bot's deliveries, newest first; the caller has checked that the bot is the owner's (getBot). */
export async function deliveryLog(
  ctx: AppContext,
  botId: string,
  options: { limit: number; filter?: DeliveryFilter | undefined; before?: string | undefined },
) {
  const status = options.filter === 'retrying' ? 'pending' : (options.filter ?? null);
  const rows = await ctx.db.query<{
    id: string;
    event_id: string;
    event_type: string;
    status: 'pending' | 'failed' | 'delivered' | 'acked';
    attempts: number;
    next_attempt_at: Date;
    last_attempt_at: Date | null;
    response_status: number | null;
    response_excerpt: string | null;
    error: string | null;
    duration_ms: number | null;
    target: string | null;
    created_at: Date;
    body: string | null;
  }>(
    `SELECT d.id, d.event_id, d.event_type, d.status, d.attempts, d.next_attempt_at, d.last_attempt_at,
            d.response_status, d.response_excerpt, d.error, d.duration_ms, d.target, d.created_at, e.body
       FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id AND e.bot_id = d.bot_id
      WHERE d.bot_id = $1
        AND ($2::text IS NULL OR d.status = $2)
        AND (NOT $3::boolean OR d.attempts > 0)
        AND ($4::timestamptz IS NULL OR d.created_at < $4)
      ORDER BY d.created_at DESC, d.id DESC
      LIMIT $5`,
    [botId, status, options.filter === 'retrying', options.before ?? null, options.limit + 1],
  );
  const deliveries = rows.slice(0, options.limit).map((r) => ({
    ...r,
    // Parked until the bot's tunnel client first connects (tunnelWait.ts): no due time to show.
    waiting_for_tunnel: r.status === 'pending' && isTunnelWait(r.next_attempt_at),
    next_attempt_at:
      r.status === 'pending' && isTunnelWait(r.next_attempt_at) ? null : iso(r.next_attempt_at),
    last_attempt_at: r.last_attempt_at ? iso(r.last_attempt_at) : null,
    created_at: iso(r.created_at),
  }));
  return { deliveries, has_more: rows.length > options.limit };
}

export type LoggedDelivery = Awaited<ReturnType<typeof deliveryLog>>['deliveries'][number];

/** 404 unless the delivery is the bot's and the bot is the owner's. */
export async function assertOwnDelivery(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  deliveryId: string,
): Promise<void> {
  const own = await maybeOne(
    ctx.db,
    `SELECT 1 AS found FROM webhook_deliveries d JOIN bots b ON b.id = d.bot_id
      WHERE d.id = $1 AND d.bot_id = $2 AND b.owner_id = $3`,
    [deliveryId, botId, ownerId],
  );
  if (!own) throw notFound('Delivery');
}
