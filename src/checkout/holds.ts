import type { Queryable } from '../platform/db/port.ts';
import type { ConfirmationRow, Outcome } from '../spend/holds.ts';
import { subtractFromCounters } from '../spend/counters.ts';
import { captureDecoyHold, captureHold, releaseDecoyHold, releaseHold } from '../wallet/ledger.ts';
import { counterSpecs } from './guardrails.ts';

/**
 * The card's part of settling a held purchase (src/spend/holds.ts): a released hold gives its
 * counters back; the real profile captures or releases money, a decoy its memo rows.
 */
export async function settleCardHold(
  _ctx: unknown,
  tx: Queryable,
  c: ConfirmationRow,
  outcome: Outcome,
  now: number,
): Promise<void> {
  const heldAt = new Date(c.created_at).getTime();
  if (outcome !== 'approved') {
    const specs = counterSpecs({
      botId: c.bot_id,
      ownerId: c.owner_id,
      cardId: c.card_id,
      profileIndex: c.profile_index,
      isReal: c.is_real,
      profileWindow: c.profile_window,
    });
    await subtractFromCounters(tx, specs, c.amount_micros, heldAt);
  }
  if (c.is_real) {
    if (outcome === 'approved') await captureHold(tx, c.bot_id, c.amount_micros, now, c.id);
    else await releaseHold(tx, c.bot_id, c.amount_micros, now, c.id);
  } else if (outcome === 'approved') await captureDecoyHold(tx, c.bot_id, c.amount_micros, now, c.id);
  else await releaseDecoyHold(tx, c.bot_id, c.amount_micros, now, c.id);
}
