import { present } from '../platform/present.ts';
import { iso } from '../platform/time.ts';

// Bursts of held purchases: a bot that asks for several purchases within a few minutes, still
// waiting for the owner. Someone holding a stolen API key and the profiles file probes the six
// payment profiles this way; since every held purchase reaches the owner (whatever its profile),
// the owner sees each attempt, and the inbox and the e-mail say so (docs/owners.md).

/** A burst: this many held purchases of one bot, asked within BURST_WINDOW_MINUTES and still waiting. */
export const BURST_MIN_PURCHASES = 3;
export const BURST_WINDOW_MINUTES = 10;

/** Per bot, the largest run of its pending purchases asked within BURST_WINDOW_MINUTES, when it is a burst. */
export function burstsOf(rows: Array<{ bot_id: string; bot_name: string; created_at: Date }>) {
  const byBot = new Map<string, Array<{ at: number; name: string }>>();
  for (const r of rows) {
    const list = byBot.get(r.bot_id) ?? [];
    list.push({ at: new Date(r.created_at).getTime(), name: r.bot_name });
    byBot.set(r.bot_id, list);
  }
  const window = BURST_WINDOW_MINUTES * 60_000;
  const out = [];
  for (const [botId, list] of byBot) {
    // Rows come oldest first: a sliding window over them.
    let best: { first: (typeof list)[number]; last: (typeof list)[number]; count: number } | null = null;
    let from = 0;
    for (const [to, last] of list.entries()) {
      while (last.at - present(list[from], 'a row of the window').at > window) from++;
      const count = to - from + 1;
      if (!best || count > best.count) best = { first: present(list[from], 'the window start'), last, count };
    }
    if (!best || best.count < BURST_MIN_PURCHASES) continue;
    out.push({
      bot_id: botId,
      bot_name: best.last.name,
      pending_purchases: best.count,
      first_at: iso(best.first.at),
      last_at: iso(best.last.at),
    });
  }
  return out;
}
