import { EVENTS_CHANNEL } from '../events/outbox.ts';
import { audit } from '../owners/audit.ts';
import { ownerIdempotent } from '../owners/idempotency.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { ApiError, notFound } from '../platform/errors.ts';
import { iso } from '../platform/time.ts';
import { messageQueueEventIdsSql } from './messageQueue.ts';
import { isTunnelWait } from './tunnelWait.ts';

// Bot side: queued messages (events not delivered by webhook and not acknowledged) and their
// acknowledgement. Owner side: the delivery log of a bot and a manual retry.

export interface QueuedMessage {
  id: string;
  event: string;
  timestamp: string;
  bot_id: string;
  data: Record<string, unknown>;
}

/** Oldest first. The message is the webhook body itself (the same id, event, timestamp and data). */
export async function listMessages(ctx: AppContext, botId: string, limit: number) {
  const rows = await ctx.db.query<{ body: string }>(
    `SELECT e.body FROM events e
      WHERE e.id IN ${messageQueueEventIdsSql('$1')} AND e.acked_at IS NULL
      ORDER BY e.seq
      LIMIT $2`,
    [botId, limit + 1],
  );
  const messages = rows.slice(0, limit).map((r) => JSON.parse(r.body) as QueuedMessage);
  return { messages, has_more: rows.length > limit };
}

/**
 * Acknowledges events of this bot: they leave the queue and are no longer delivered by webhook.
 * Idempotent. Ids that are unknown or belong to another bot are returned in `not_found` (the two
 * cases are indistinguishable on purpose) and change nothing.
 */
export async function ackMessages(ctx: AppContext, botId: string, eventIds: readonly string[]) {
  const ids = [...new Set(eventIds)];
  const now = new Date(ctx.clock.now());
  const acked = await ctx.db.transaction(async (tx) => {
    const rows = await tx.query<{ id: string }>(
      `UPDATE events SET acked_at = coalesce(acked_at, $3)
        WHERE bot_id = $1 AND id = ANY($2::text[])
        RETURNING id`,
      [botId, ids, now],
    );
    const own = rows.map((r) => r.id);
    if (own.length > 0) {
      // Their queue rows go with them (the trigger webhook_deliveries_queue_sync, 0046).
      await tx.query(
        `UPDATE webhook_deliveries SET status = 'acked'
          WHERE event_id = ANY($1::text[]) AND status = 'pending'`,
        [own],
      );
    }
    return new Set(own);
  });
  return {
    acknowledged: ids.filter((id) => acked.has(id)),
    not_found: ids.filter((id) => !acked.has(id)),
  };
}

interface DeliveryRow {
  id: string;
  event_id: string;
  bot_id: string;
  event_type: string;
  status: 'pending' | 'failed' | 'delivered' | 'acked';
  attempts: number;
  next_attempt_at: Date;
  last_attempt_at: Date | null;
  delivered_at: Date | null;
  response_status: number | null;
  response_excerpt: string | null;
  error: string | null;
  duration_ms: number | null;
  target: string | null;
  created_at: Date;
  [key: string]: unknown;
}

const DELIVERY_COLUMNS = `d.id, d.event_id, d.bot_id, d.event_type, d.status, d.attempts, d.next_attempt_at,
  d.last_attempt_at, d.delivered_at, d.response_status, d.response_excerpt, d.error, d.duration_ms, d.target,
  d.created_at`;

function present(row: DeliveryRow) {
  return {
    id: row.id,
    event_id: row.event_id,
    event: row.event_type,
    status: row.status,
    attempts: row.attempts,
    waiting_for_tunnel: row.status === 'pending' && isTunnelWait(row.next_attempt_at),
    created_at: iso(row.created_at),
    last_attempt_at: row.last_attempt_at ? iso(row.last_attempt_at) : null,
    // null too while the delivery waits for the bot's tunnel client to connect first (tunnelWait.ts).
    next_attempt_at:
      row.status === 'pending' && !isTunnelWait(row.next_attempt_at) ? iso(row.next_attempt_at) : null,
    delivered_at: row.delivered_at ? iso(row.delivered_at) : null,
    response_status: row.response_status,
    response_excerpt: row.response_excerpt,
    error: row.error,
    duration_ms: row.duration_ms,
    target: row.target,
  };
}

export type DeliveryView = ReturnType<typeof present>;

interface AttemptRow {
  delivery_id: string;
  attempt: number;
  attempted_at: Date;
  ok: boolean;
  response_status: number | null;
  response_excerpt: string | null;
  error: string | null;
  duration_ms: number | null;
  target: string | null;
  [key: string]: unknown;
}

function presentAttempt(row: AttemptRow) {
  return {
    attempt: row.attempt,
    attempted_at: iso(row.attempted_at),
    ok: row.ok,
    response_status: row.response_status,
    response_excerpt: row.response_excerpt,
    error: row.error,
    duration_ms: row.duration_ms,
    target: row.target,
  };
}

/** Every recorded attempt of these deliveries, oldest first, by delivery id. */
async function attemptsOf(ctx: AppContext, deliveryIds: readonly string[]) {
  const byDelivery = new Map<string, ReturnType<typeof presentAttempt>[]>();
  if (deliveryIds.length === 0) return byDelivery;
  const rows = await ctx.db.query<AttemptRow>(
    `SELECT delivery_id, attempt, attempted_at, ok, response_status, response_excerpt, error, duration_ms, target
       FROM webhook_attempts WHERE delivery_id = ANY($1::text[])
      ORDER BY delivery_id, attempt`,
    [deliveryIds],
  );
  for (const row of rows) {
    const list = byDelivery.get(row.delivery_id) ?? [];
    list.push(presentAttempt(row));
    byDelivery.set(row.delivery_id, list);
  }
  return byDelivery;
}

/** One delivery of one of the owner's bots with every attempt it kept (attempt_log). */
export async function getDelivery(ctx: AppContext, ownerId: string, deliveryId: string) {
  const row = await maybeOne<DeliveryRow>(
    ctx.db,
    `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d JOIN bots b ON b.id = d.bot_id
      WHERE d.id = $1 AND b.owner_id = $2`,
    [deliveryId, ownerId],
  );
  if (!row) throw notFound('Delivery');
  const attempts = await attemptsOf(ctx, [row.id]);
  return { delivery: { ...present(row), attempt_log: attempts.get(row.id) ?? [] } };
}

export async function listDeliveries(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  options: { limit: number; status?: string; before?: string; includeAttempts?: boolean },
) {
  const bot = await maybeOne(ctx.db, 'SELECT id FROM bots WHERE id = $1 AND owner_id = $2', [botId, ownerId]);
  if (!bot) throw notFound('Bot');
  const rows = await ctx.db.query<DeliveryRow>(
    `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d
      WHERE d.bot_id = $1
        AND ($2::text IS NULL OR d.status = $2)
        AND ($3::timestamptz IS NULL OR d.created_at < $3)
      ORDER BY d.created_at DESC, d.id DESC
      LIMIT $4`,
    [botId, options.status ?? null, options.before ?? null, options.limit + 1],
  );
  const page = rows.slice(0, options.limit);
  if (!options.includeAttempts) {
    return { deliveries: page.map(present), has_more: rows.length > options.limit };
  }
  const attempts = await attemptsOf(
    ctx,
    page.map((r) => r.id),
  );
  return {
    deliveries: page.map((r) => ({ ...present(r), attempt_log: attempts.get(r.id) ?? [] })),
    has_more: rows.length > options.limit,
  };
}

/** Sends a failed or pending delivery again now (one more attempt; a pending one keeps its schedule). */
export async function retryDelivery(
  ctx: AppContext,
  ownerId: string,
  deliveryId: string,
  idempotencyKey?: string,
) {
  const now = ctx.clock.now();
  // With an Idempotency-Key (owners/idempotency.ts) a repeated call answers the first retry again
  // instead of queuing the delivery once more.
  const call = {
    ownerId,
    key: idempotencyKey,
    operation: 'webhook_delivery.retry',
    request: { delivery_id: deliveryId },
  };
  const row = await ownerIdempotent(ctx, call, async (tx) => {
    const current = await maybeOne<DeliveryRow>(
      tx,
      `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d JOIN bots b ON b.id = d.bot_id
        WHERE d.id = $1 AND b.owner_id = $2
        FOR UPDATE OF d`,
      [deliveryId, ownerId],
    );
    if (!current) throw notFound('Delivery');
    if (current.status !== 'failed' && current.status !== 'pending') {
      throw new ApiError(
        'conflict',
        `The delivery is ${current.status}; only failed or pending deliveries can be retried.`,
        {
          status: current.status,
        },
      );
    }
    // Queued again, due now (the trigger webhook_deliveries_queue_sync, 0046, writes the queue row;
    // a lease under way is kept).
    const updated = await maybeOne<DeliveryRow>(
      tx,
      `UPDATE webhook_deliveries d SET status = 'pending', next_attempt_at = $2, failed_at = NULL
        WHERE d.id = $1
        RETURNING ${DELIVERY_COLUMNS}`,
      [deliveryId, new Date(now)],
    );
    await audit(tx, {
      ownerId,
      botId: current.bot_id,
      action: 'webhook_delivery.retried',
      details: { delivery_id: deliveryId, previous_status: current.status },
      at: now,
    });
    // Wakes the delivery workers of every instance, after commit (botpay_notify, migration 0001).
    await tx.query('SELECT botpay_notify($1, $2)', [EVENTS_CHANNEL, current.bot_id]);
    // The row is locked above, so the update finds it; anything else is a bug, not a client error.
    if (!updated) throw new Error(`delivery ${deliveryId} vanished while locked for a retry`);
    return present(updated);
  });
  return { delivery: row };
}
