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

export interface NewEvent {
  botId: string;
  type: EventType;
  data: Record<string, unknown>;
  at: number;
}

function eventBody(event: NewEvent): EmittedEvent {
  const id = newTimeOrderedId('evt', event.at);
  const body = JSON.stringify({
    id,
    event: event.type,
    timestamp: new Date(event.at).toISOString(),
    bot_id: event.botId,
    data: event.data,
  });
  return { id, body };
}

export async function emitEvent(tx: Queryable, event: NewEvent): Promise<EmittedEvent> {
  const { id, body } = eventBody(event);
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

/**
 * Several events in one statement, inserted in the order given (a bot's events are delivered in
 * insertion order: the queue's sequence is taken row by row by the insert trigger).
 */
export async function emitEvents(tx: Queryable, events: readonly NewEvent[]): Promise<EmittedEvent[]> {
  if (events.length === 0) return [];
  const emitted = events.map(eventBody);
  await tx.query(
    `INSERT INTO events (id, bot_id, type, body, created_at)
     SELECT e.id, e.bot_id, e.type, e.body, e.created_at FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[]) WITH ORDINALITY
       AS e(id, bot_id, type, body, created_at, n) ORDER BY n`,
    [
      emitted.map((e) => e.id),
      events.map((e) => e.botId),
      events.map((e) => e.type),
      emitted.map((e) => e.body),
      events.map((e) => new Date(e.at)),
    ],
  );
  return emitted;
}
