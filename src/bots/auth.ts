import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../platform/context.ts';
import { sha256Hex } from '../platform/crypto.ts';
import { authenticationRequired } from '../platform/errors.ts';

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

// Key hash → bot, cached in-process for at most CACHE_MS. A rotated key stops working here at once
// (rotation evicts it) and on other instances within CACHE_MS, inside the one-second budget.
const CACHE_MS = 900;
const CACHE_MAX = 10_000;

export function createBotAuthenticator(ctx: AppContext) {
  const cache = new Map<string, { bot: AuthenticatedBot; until: number }>();

  async function authenticate(request: FastifyRequest): Promise<AuthenticatedBot> {
    const header = request.headers.authorization;
    // The scheme name is case-insensitive (RFC 9110 §11.1).
    if (typeof header !== 'string' || !/^bearer /i.test(header)) throw authenticationRequired();
    const key = header.slice(7).trim();
    if (!API_KEY_PATTERN.test(key)) throw authenticationRequired();
    const hash = sha256Hex(key);
    const now = Date.now();
    const hit = cache.get(hash);
    if (hit && hit.until > now) return hit.bot;
    const rows = await ctx.db.query<{ id: string }>('SELECT id FROM bots WHERE api_key_hash = $1', [hash]);
    const row = rows[0];
    if (!row) {
      cache.delete(hash);
      throw authenticationRequired();
    }
    const bot = { id: row.id };
    if (cache.size >= CACHE_MAX) cache.clear();
    cache.set(hash, { bot, until: now + CACHE_MS });
    return bot;
  }

  return {
    authenticate,
    /** Drops every cached key of a bot (after rotation or claim). */
    forgetBot(botId: string) {
      for (const [hash, entry] of cache) if (entry.bot.id === botId) cache.delete(hash);
    },
  };
}

export type BotAuthenticator = ReturnType<typeof createBotAuthenticator>;
