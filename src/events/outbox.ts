import { newTimeOrderedId } from '../platform/ids.ts';
import type { Queryable } from '../platform/db/port.ts';

// The transactional outbox. Call emitEvent with the transaction that makes the change, so the
// event commits (or rolls back) with it. The body is serialised once, here: the delivery worker
// sends exactly these bytes on every attempt, so the signature never changes between retries.

export const EVENTS_CHANNEL = 'botpay_events';

export type EventType =
  | 'wallet.activated'
  | 'wallet.funded'
  | 'wallet.frozen'
  | 'wallet.unfrozen'
  | 'wallet.balance_low'
  | 'wallet.topup_requested'
  | 'wallet.topup_approved'
  | 'wallet.topup_declined'
  | 'wallet.topup_expired'
  | 'purchase.approved'
  | 'purchase.denied'
  | 'purchase.expired'
  | 'task.available'
  | 'rails.updated'
  | 'x402.funded'
  | 'x402.settled'
  | 'x402.lapsed'
  | 'x402.refused'
  | 'x402.balance_mismatch';

export interface EmittedEvent {
  id: string;
  body: string;
}

export async function emitEvent(
  tx: Queryable,
  event: { botId: string; type: EventType; data: Record<string, unknown>; at: number },
): Promise<EmittedEvent> {
  const id = newTimeOrderedId('evt', event.at);
  const body = JSON.stringify({
    id,
    event: event.type,
    timestamp: new Date(event.at).toISOString(),
    bot_id: event.botId,
    data: event.data,
  });
  await tx.query('INSERT INTO events (id, bot_id, type, body, created_at) VALUES ($1, $2, $3, $4, $5)', [
    id,
    event.botId,
    event.type,
    body,
    new Date(event.at),
  ]);
  // The insert trigger events_wake (0001) notifies EVENTS_CHANNEL after commit: wakes the workers.
  return { id, body };
}
