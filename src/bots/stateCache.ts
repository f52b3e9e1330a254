import type { AppContext } from '../platform/context.ts';

// Bot status and wallet check are read far more often than they change. Each instance keeps the
// last answer per bot for at most config.statusCacheMs and drops it as soon as the database
// announces a change (triggers notify_bot_state → botpay_notify → channel botpay_bot_state
// after commit, see 0001). Money
// decisions never read this cache: checkouts decide on fresh rows inside their transaction.

export const BOT_STATE_CHANNEL = 'botpay_bot_state';

interface Entry {
  value: unknown;
  ownerId: string | null;
  until: number;
}

export interface BotStateCache {
  get<T>(
    kind: string,
    botId: string,
    compute: () => Promise<{ value: T; ownerId: string | null }>,
  ): Promise<T>;
  invalidate(key: string): void;
  stop(): Promise<void>;
}

export async function createBotStateCache(ctx: AppContext): Promise<BotStateCache> {
  const ttl = ctx.config.statusCacheMs;
  const entries = new Map<string, Entry>();
  const MAX = 50_000;
  // Bumped by every invalidation: an answer computed while a change committed is not kept.
  let epoch = 0;

  function invalidate(key: string): void {
    epoch++;
    if (key.startsWith('bot:')) {
      const botId = key.slice(4);
      for (const k of entries.keys()) if (k.endsWith(`|${botId}`)) entries.delete(k);
    } else if (key.startsWith('owner:')) {
      const ownerId = key.slice(6);
      for (const [k, e] of entries) if (e.ownerId === ownerId) entries.delete(k);
    } else {
      entries.clear();
    }
  }

  let unlisten: (() => Promise<void>) | undefined;
  let stopLocal: (() => void) | undefined;
  if (ttl > 0) {
    // Payloads of one notification are comma-joined keys (see the PostgreSQL driver).
    unlisten = await ctx.db.listen(BOT_STATE_CHANNEL, (payload) => {
      for (const key of payload.split(',')) invalidate(key);
    });
    // A write committed by this process is visible to its next read at once (read your writes);
    // writes of other instances arrive through NOTIFY within milliseconds.
    stopLocal = ctx.db.onCommit(() => {
      if (entries.size > 0) invalidate('*');
      else epoch++;
    });
  }

  return {
    async get(kind, botId, compute) {
      const key = `${kind}|${botId}`;
      const now = Date.now();
      const hit = entries.get(key);
      if (hit && hit.until > now) return hit.value as never;
      const startedAt = epoch;
      const { value, ownerId } = await compute();
      if (ttl > 0 && startedAt === epoch) {
        if (entries.size >= MAX) entries.clear();
        entries.set(key, { value, ownerId, until: now + ttl });
      }
      return value;
    },
    invalidate,
    async stop() {
      entries.clear();
      stopLocal?.();
      await unlisten?.();
    },
  };
}
