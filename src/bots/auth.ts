import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../platform/context.ts';
import { sha256Hex } from '../platform/crypto.ts';
import { authenticationRequired } from '../platform/errors.ts';

/** Announces a bot's key change or removal (trigger bots_key, 0021); the payload is the bot id. */
export const BOT_KEYS_CHANNEL = 'botpay_bot_keys';

export const API_KEY_PATTERN = /^svc_live_[0-9a-f]{48}$/;

/** Only the id: everything else (owner, wallet status) is read fresh inside each handler's transaction. */
export interface AuthenticatedBot {
  id: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    bot?: AuthenticatedBot;
  }
}

/** The bot the `/api/v1/bot/` hook authenticated (401 if a route outside it asks). */
export function botOf(request: FastifyRequest): AuthenticatedBot {
  if (!request.bot) throw authenticationRequired();
  return request.bot;
}

// Key hash → bot, cached in-process so that a request costs no key lookup. A rotated or removed
// key stops working at once on every instance: the change is announced on botpay_bot_keys
// (trigger bots_key, 0021) and drops the bot's entries here, on this instance before the
// rotation's response is sent, on others when the NOTIFY arrives. CACHE_MS bounds the
// entry's life should a notification be lost (the committing instance crashed before sending it,
// the listening connection dropped: that one re-announces '*'). Only keys the database accepted
// are cached, so guessing keys costs a database query each, as without the cache; the number of
// entries is bounded (the oldest goes).
const CACHE_MS = 900;
const CACHE_MAX = 10_000;

interface Flight {
  promise: Promise<AuthenticatedBot | undefined>;
  /** forgetAll() ran while it was under way. */
  stale: boolean;
  /** `seq` when it started: a key change of its bot announced later means its answer is not kept. */
  startSeq: number;
}

export function createBotAuthenticator(
  ctx: AppContext,
  options: { ttlMs?: number; maxEntries?: number } = {},
) {
  const ttl = options.ttlMs ?? CACHE_MS;
  const max = options.maxEntries ?? CACHE_MAX;
  const cache = new Map<string, { bot: AuthenticatedBot; until: number }>();
  /** bot id → the key hashes cached for it (one normally; two while a rotation settles). */
  const byBot = new Map<string, Set<string>>();
  // Concurrent requests with the same key share one lookup.
  const flights = new Map<string, Flight>();
  // Key changes announced while lookups run (bot id → seq); emptied whenever no lookup runs.
  let seq = 0;
  const changedAt = new Map<string, number>();
  let inFlight = 0;

  function remove(hash: string): void {
    const entry = cache.get(hash);
    if (!entry) return;
    cache.delete(hash);
    const hashes = byBot.get(entry.bot.id);
    hashes?.delete(hash);
    if (hashes?.size === 0) byBot.delete(entry.bot.id);
  }

  function forgetBot(botId: string): void {
    for (const hash of byBot.get(botId) ?? []) cache.delete(hash);
    byBot.delete(botId);
    // Whose key a running lookup resolves is known only when it ends: remember the change, and
    // let no request join a lookup that started before it.
    if (flights.size > 0) {
      changedAt.set(botId, ++seq);
      flights.clear();
    }
  }

  function forgetAll(): void {
    cache.clear();
    byBot.clear();
    for (const flight of flights.values()) flight.stale = true;
    flights.clear();
    changedAt.clear();
  }

  async function lookup(hash: string): Promise<AuthenticatedBot | undefined> {
    const rows = await ctx.db.query<{ id: string }>('SELECT id FROM bots WHERE api_key_hash = $1', [hash]);
    return rows[0] ? { id: rows[0].id } : undefined;
  }

  function store(hash: string, bot: AuthenticatedBot, until: number): void {
    if (cache.size >= max) {
      const oldest = cache.keys().next().value;
      if (oldest !== undefined) remove(oldest);
    }
    cache.set(hash, { bot, until });
    let hashes = byBot.get(bot.id);
    if (!hashes) {
      hashes = new Set();
      byBot.set(bot.id, hashes);
    }
    hashes.add(hash);
  }

  /** The key's hash; throws 401 when the header holds no well-formed key. */
  function keyHash(request: FastifyRequest): string {
    const header = request.headers.authorization;
    // The scheme name is case-insensitive (RFC 9110 §11.1).
    if (typeof header !== 'string' || !/^bearer /i.test(header)) throw authenticationRequired();
    const key = header.slice(7).trim();
    if (!API_KEY_PATTERN.test(key)) throw authenticationRequired();
    return sha256Hex(key);
  }

  function fromCache(hash: string): AuthenticatedBot | undefined {
    const hit = cache.get(hash);
    if (!hit) return undefined;
    if (hit.until > Date.now()) return hit.bot;
    remove(hash);
    return undefined;
  }

  /** The bot when its key is cached (no promise, no query); undefined: call authenticate. */
  function cached(request: FastifyRequest): AuthenticatedBot | undefined {
    return fromCache(keyHash(request));
  }

  async function authenticate(request: FastifyRequest): Promise<AuthenticatedBot> {
    const hash = keyHash(request);
    const hit = fromCache(hash);
    if (hit) return hit;
    let flight = flights.get(hash);
    if (!flight) {
      const started = Date.now();
      const own: Flight = { promise: lookup(hash), stale: false, startSeq: seq };
      flight = own;
      flights.set(hash, own);
      inFlight++;
      const settle = () => {
        if (flights.get(hash) === own) flights.delete(hash);
        if (--inFlight === 0) changedAt.clear();
      };
      own.promise.then((bot) => {
        const changed = bot ? (changedAt.get(bot.id) ?? -1) > own.startSeq : false;
        if (bot && !own.stale && !changed && ttl > 0) store(hash, bot, started + ttl);
        settle();
      }, settle);
    }
    const bot = await flight.promise;
    if (!bot) throw authenticationRequired();
    return bot;
  }

  // Subscribed before the first request (registerBotRoutes awaits `ready`). '*': the listening
  // connection was re-established and announcements may have been missed.
  const ready = ctx.db.listen(BOT_KEYS_CHANNEL, (payload) => {
    for (const botId of payload.split(',')) {
      if (botId === '*') forgetAll();
      else forgetBot(botId);
    }
  });

  return {
    authenticate,
    cached,
    /** Resolves to the unsubscribe function once the key-change listener is in place. */
    ready,
    /** Drops every cached key of a bot (after rotation or claim). */
    forgetBot,
    /** Entries held (tests check the bound). */
    get size() {
      return cache.size;
    },
  };
}

export type BotAuthenticator = ReturnType<typeof createBotAuthenticator>;
