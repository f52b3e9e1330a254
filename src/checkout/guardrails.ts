import type { WindowKind } from '../platform/time.ts';
import type { CounterSpec } from '../spend/counters.ts';

// The TypeScript side of the card's guardrail chain: which counters a purchase counted in
// (subtracted again when a hold is denied or expires; the refusals are src/spend/refusals.ts). The chain itself, its
// limits and the approval decision run in spend_run with the method 'card'
// (src/migrations/functions/spend_run.sql); the scopes below are the ones it adds to.

export interface PurchaseScope {
  botId: string;
  ownerId: string;
  cardId: string;
  profileIndex: number;
  isReal: boolean;
  profileWindow: WindowKind;
}

/**
 * The counters a purchase counts in, in the global lock order (card → owner → bot).
 *
 * A decoy profile's card-level windows are kept per profile ('card:<id>:p<index>'), exactly as the
 * real profile's are kept in 'card:<id>' (which only real purchases reach), with the profile's
 * allowance in the same row (migration 0059: both count this profile's purchases), and it never consumes the
 * owner's master budget: it counts in the owner's memo counter ('owner:<id>:decoy', never read)
 * where a real purchase counts in the master budget, so that adding and releasing take the same
 * statements on every profile (a released decoy once skipped the owner's row: its expiry, settled
 * by the bot's own poll, was one statement quicker). Every profile counts in the bot's own figures
 * ('bot:<id>'), so what the bot sees moves alike whichever profile it used (docs/security.md).
 */
export function counterSpecs(p: PurchaseScope): CounterSpec[] {
  const cardScope = p.isReal ? `card:${p.cardId}` : `card:${p.cardId}:p${p.profileIndex}`;
  const owner = p.isReal ? `owner:${p.ownerId}` : `owner:${p.ownerId}:decoy`;
  const bot = `bot:${p.botId}`;
  return [
    { name: 'card_daily', scope: cardScope, kind: 'day' },
    { name: 'card_monthly', scope: cardScope, kind: 'month' },
    // The allowance counts in the same row (migration 0059): a day or month allowance in the card's
    // own windows, a weekly one in the row's week window (subtractFromCounters merges the three).
    { name: 'profile_allowance', scope: cardScope, kind: p.profileWindow },
    { name: 'master_daily', scope: owner, kind: 'day' },
    { name: 'master_monthly', scope: owner, kind: 'month' },
    { name: 'bot_monthly', scope: bot, kind: 'month' },
  ];
}
