import type { AppContext } from '../platform/context.ts';

// Bot status and wallet check are read far more often than they change. Each instance keeps the
// last answer per bot for at most config.statusCacheMs and drops it as soon as the database
// announces a change: triggers (notify_bot_state, 0001, 0013, 0021) name the bot or owner on
// channel botpay_bot_state after commit. The database port hands this process's own
// notifications to its listeners before the committing call returns (read your writes); other
// instances' arrive through LISTEN within milliseconds. Commits that touch nothing a status shows
// (job ticks, mail bookkeeping) invalidate nothing. Money decisions never read this cache:
// checkouts decide on fresh rows inside their transaction.

export const BOT_STATE_CHANNEL = 'botpay_bot_state';

interface Entry {
  value: unknown;
  ownerId: string | null;
  until: number;
  /** The answer serialised by the route's response schema, made on the entry's first hit. */
  json: string | undefined;
}

/** A fresh answer as `peek` hands it out: the value, and the JSON text the route keeps with it. */
export interface CachedAnswer {
  readonly value: unknown;
  json: string | undefined;
}

/** Computes one bot's answer (a module-level function: no closure is made per request). */
export type Compute<T> = (botId: string) => Promise<{ value: T; ownerId: string | null }>;

interface Flight {
  promise: Promise<{ value: unknown; ownerId: string | null }>;
  /** Set when a change was announced while this computation ran: its answer is not kept. */
  stale: boolean;
}

export interface BotStateCache {
  get<T>(kind: string, botId: string, compute: Compute<T>): Promise<T>;
  /**
   * The cached answer when it is fresh, without a promise (the hot path of GET /api/v1/bot/status);
   * undefined: call get. Starts the same background refresh as get in an entry's last quarter.
   * The returned object is the entry: a route may keep the answer's JSON text in `json`, which
   * goes with the entry when a change drops it.
   */
  peek(kind: string, botId: string, compute: Compute<unknown>): CachedAnswer | undefined;
  invalidate(key: string): void;
  stop(): Promise<void>;
}

export async function createBotStateCache(
  ctx: AppContext,
  options: { maxEntries?: number } = {},
): Promise<BotStateCache> {
  const ttl = ctx.config.statusCacheMs;
  const max = options.maxEntries ?? 50_000;
  const entries = new Map<string, Entry>();
  // One computation per key at a time: a burst of requests after an expiry or a change costs one
  // query, not one per request.
  const flights = new Map<string, Flight>();
  const kinds = new Set<string>();

  function dropKey(key: string): void {
    entries.delete(key);
    const flight = flights.get(key);
    if (flight) {
      flight.stale = true;
      flights.delete(key);
    }
  }

  function invalidate(key: string): void {
    if (key.startsWith('bot:')) {
      const botId = key.slice(4);
      for (const kind of kinds) dropKey(`${kind}|${botId}`);
    } else if (key.startsWith('owner:')) {
      const ownerId = key.slice(6);
      for (const [k, e] of entries) if (e.ownerId === ownerId) entries.delete(k);
      // Whose owner a running computation reads is known only when it ends: none is kept.
      for (const k of [...flights.keys()]) dropKey(k);
    } else {
      entries.clear();
      for (const k of [...flights.keys()]) dropKey(k);
    }
  }

  function start(key: string, kind: string, botId: string, compute: Compute<unknown>): Flight {
    kinds.add(kind);
    const started = Date.now();
    const own: Flight = { promise: compute(botId), stale: false };
    flights.set(key, own);
    own.promise.then(
      ({ value, ownerId }) => {
        if (flights.get(key) === own) flights.delete(key);
        if (own.stale) return;
        entries.delete(key);
        if (entries.size >= max) {
          // The oldest entry goes (Map keeps insertion order): memory stays bounded.
          const oldest = entries.keys().next().value;
          if (oldest !== undefined) entries.delete(oldest);
        }
        entries.set(key, { value, ownerId, until: started + ttl, json: undefined });
      },
      () => {
        if (flights.get(key) === own) flights.delete(key);
      },
    );
    return own;
  }

  let unlisten: (() => Promise<void>) | undefined;
  if (ttl > 0) {
    // Payloads of one notification are comma-joined keys (see the PostgreSQL driver).
    unlisten = await ctx.db.listen(BOT_STATE_CHANNEL, (payload) => {
      for (const key of payload.split(',')) invalidate(key);
    });
  }

  /** The fresh entry of key (refreshed in the background in its last quarter), or undefined. */
  function fresh(key: string, kind: string, botId: string, compute: Compute<unknown>): Entry | undefined {
    const hit = entries.get(key);
    if (!hit) return undefined;
    const now = Date.now();
    if (hit.until > now) {
      // In the last quarter of its life an entry is refreshed in the background while it is
      // still served: a bot read steadily never waits for the database at expiry. What is
      // served stays younger than the TTL, and a change still drops it at once.
      if (hit.until - now < ttl / 4 && !flights.has(key)) start(key, kind, botId, compute);
      return hit;
    }
    entries.delete(key);
    return undefined;
  }

  return {
    async get(kind, botId, compute) {
      if (ttl <= 0) return (await compute(botId)).value;
      const key = `${kind}|${botId}`;
      const hit = fresh(key, kind, botId, compute);
      if (hit) return hit.value as never;
      const flight = flights.get(key) ?? start(key, kind, botId, compute);
      return (await flight.promise).value as never;
    },
    peek(kind, botId, compute) {
      if (ttl <= 0) return undefined;
      return fresh(`${kind}|${botId}`, kind, botId, compute);
    },
    invalidate,
    async stop() {
      entries.clear();
      flights.clear();
      await unlisten?.();
    },
  };
}
