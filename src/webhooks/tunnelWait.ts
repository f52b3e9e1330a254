import { EVENTS_CHANNEL } from '../events/outbox.ts';
import type { AppContext } from '../platform/context.ts';
import type { Db } from '../platform/db/port.ts';

// Deliveries for a managed-tunnel bot whose tunnel client has never connected wait for it instead
// of failing: a bot that was just registered is not broken, it is waiting for its owner's machine to
// run the command it was given (docs/webhooks.md, "Waiting for the tunnel client").
//
// The worker sends as usual; when the relay reports that no tunnel client is connected for the bot
// (never resolving the tunnel hostname through DNS: src/webhooks/sender.ts), the delivery is parked
// here: its lease released, no attempt counted, health untouched, its due time (the queue row's
// due_at, and next_attempt_at on the delivery row) set to a sentinel far in the future that no claim
// reaches. The first connection of the bot's tunnel client sets
// bots.tunnel_connected_at and makes the parked deliveries due again (at their creation time, so
// they keep their order), in one transaction, and wakes the workers.
//
// The race between the two is closed by the bot row: parking reads tunnel_connected_at FOR SHARE
// and the connection writes it (FOR UPDATE), each before touching deliveries, so either the park
// sees the connection (and does not park: the attempt is then an ordinary failure) or the wake sees
// the parked row. Once a tunnel has connected, a tunnel that is down again is an ordinary failed
// attempt (the bot worked and stopped: its health degrades as SPEC's section 3.3 says).

/** next_attempt_at of a parked delivery: after any due time a claim compares it with. */
export const TUNNEL_WAIT_SENTINEL = new Date('9999-12-31T00:00:00.000Z');

/** True for a next_attempt_at that is the parking sentinel (the database's value, as read). */
export function isTunnelWait(nextAttemptAt: Date | string | null | undefined): boolean {
  if (!nextAttemptAt) return false;
  const time = nextAttemptAt instanceof Date ? nextAttemptAt.getTime() : Date.parse(nextAttemptAt);
  return time >= TUNNEL_WAIT_SENTINEL.getTime();
}

/**
 * Parks a claimed delivery (still leased with `token`) until the bot's tunnel client connects, when
 * that client has never connected. Returns false (and changes nothing) when it has connected before
 * or the lease is no longer this worker's: the caller then records an ordinary failed attempt.
 */
export async function parkUntilTunnel(
  db: Db,
  deliveryId: string,
  token: string,
  botId: string,
): Promise<boolean> {
  return db.transaction(async (tx) => {
    const bot = await tx.query<{ tunnel_connected_at: Date | null }>(
      'SELECT tunnel_connected_at FROM bots WHERE id = $1 FOR SHARE',
      [botId],
    );
    if (!bot[0] || bot[0].tunnel_connected_at !== null) return false;
    // The queue row (0046) holds the lease and the due time the claim reads; the delivery row's
    // next_attempt_at is what the log shows (the trigger that follows it finds the queue row parked).
    const parked = await tx.query<{ delivery_id: string }>(
      `UPDATE webhook_queue
          SET due_at = $3, locked_until = NULL, lock_token = NULL
        WHERE delivery_id = $1 AND lock_token = $2
        RETURNING delivery_id`,
      [deliveryId, token, TUNNEL_WAIT_SENTINEL],
    );
    if (parked.length === 0) return false;
    await tx.query(
      `UPDATE webhook_deliveries SET next_attempt_at = $2 WHERE id = $1 AND status = 'pending'`,
      [deliveryId, TUNNEL_WAIT_SENTINEL],
    );
    return true;
  });
}

/**
 * The bot's tunnel client connected (and this instance can deliver to it): remembers that it has
 * connected and makes its parked deliveries due, then wakes the delivery workers.
 */
export async function tunnelConnected(ctx: Pick<AppContext, 'db' | 'clock'>, botId: string): Promise<number> {
  const now = new Date(ctx.clock.now());
  return ctx.db.transaction(async (tx) => {
    await tx.query('UPDATE bots SET tunnel_connected_at = coalesce(tunnel_connected_at, $2) WHERE id = $1', [
      botId,
      now,
    ]);
    // The queue rows follow (the trigger webhook_deliveries_queue_sync, 0046): due again.
    const woken = await tx.query<{ id: string }>(
      `UPDATE webhook_deliveries SET next_attempt_at = least(created_at, $3)
        WHERE bot_id = $1 AND status = 'pending' AND next_attempt_at >= $2
        RETURNING id`,
      [botId, TUNNEL_WAIT_SENTINEL, now],
    );
    if (woken.length > 0) await tx.query('SELECT botpay_notify($1, $2)', [EVENTS_CHANNEL, botId]);
    return woken.length;
  });
}
