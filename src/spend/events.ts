import { emitEvent } from '../events/outbox.ts';
import type { Queryable } from '../platform/db/port.ts';
import { newTimeOrderedId } from '../platform/ids.ts';
import { microsToUsd } from '../platform/money.ts';

// purchase.* events of both rails: a card purchase and an x402 payment are announced alike.

function purchaseData(c: PurchaseEventInput, type: PurchaseEventType) {
  return {
    checkout_id: c.id,
    amount: microsToUsd(c.amountMicros),
    vendor: c.merchantName,
    description: c.itemName,
    status: type.slice('purchase.'.length),
  };
}

export type PurchaseEventType = 'purchase.approved' | 'purchase.denied' | 'purchase.expired';
export interface PurchaseEventInput {
  id: string;
  botId: string;
  amountMicros: number;
  merchantName: string;
  itemName: string;
}

/**
 * The outbox row of a purchase event written by spend_run, serialised exactly as emitEvent
 * does (src/events/outbox.ts): the body is built here, the database function only stores it.
 */
export function purchaseEventRow(type: PurchaseEventType, c: PurchaseEventInput, at: number) {
  const id = newTimeOrderedId('evt', at);
  const body = JSON.stringify({
    id,
    event: type,
    timestamp: new Date(at).toISOString(),
    bot_id: c.botId,
    data: purchaseData(c, type),
  });
  return { id, body };
}

/** purchase.* events: data as docs/webhooks.md lists it (checkout_id, amount, vendor, description) plus status. No card digits. */
export async function emitPurchaseEvent(
  tx: Queryable,
  type: PurchaseEventType,
  c: PurchaseEventInput,
  at: number,
): Promise<void> {
  await emitEvent(tx, { botId: c.botId, type, data: purchaseData(c, type), at });
}
