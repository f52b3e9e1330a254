import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { notFound } from '../platform/errors.ts';

/** The bot, locked for update, if it belongs to the owner; otherwise 404 (never 403: no existence leak). */
export async function lockOwnedBot(
  tx: Queryable,
  ownerId: string,
  botId: string,
): Promise<{ id: string; name: string; owner_email: string }> {
  const bot = await maybeOne<{ id: string; name: string; owner_email: string }>(
    tx,
    'SELECT id, name, owner_email FROM bots WHERE id = $1 AND owner_id = $2 FOR UPDATE',
    [botId, ownerId],
  );
  if (!bot) throw notFound('Bot');
  return bot;
}

/** 404 unless the bot belongs to the owner (a read without a lock). */
export async function assertOwnedBot(q: Queryable, ownerId: string, botId: string): Promise<void> {
  const owned = await maybeOne(q, 'SELECT 1 AS found FROM bots WHERE id = $1 AND owner_id = $2', [
    botId,
    ownerId,
  ]);
  if (!owned) throw notFound('Bot');
}
