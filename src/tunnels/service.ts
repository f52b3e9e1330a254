import { TUNNEL_TOKEN_ENV, tunnelClientCommand } from '../bots/tunnelSetup.ts';
import { audit, lockOwnedBot } from '../owners/service.ts';
import type { AppContext } from '../platform/context.ts';
import { randomHex, sha256Hex } from '../platform/crypto.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';

const TUNNEL_TOKEN = /^svc_tun_[0-9a-f]{48}$/;

export interface TunnelBot {
  id: string;
  hostname: string;
  tokenHash: string;
}

/** The bot a tunnel token belongs to, or null. A token only ever yields its own bot's hostname. */
export async function authenticateTunnelToken(db: Queryable, token: string): Promise<TunnelBot | null> {
  if (!TUNNEL_TOKEN.test(token)) return null;
  const tokenHash = sha256Hex(token);
  const row = await maybeOne<{ id: string; tunnel_hostname: string }>(
    db,
    'SELECT id, tunnel_hostname FROM bots WHERE tunnel_token_hash = $1 AND tunnel_hostname IS NOT NULL',
    [tokenHash],
  );
  return row ? { id: row.id, hostname: row.tunnel_hostname, tokenHash } : null;
}

/** Of the given connections, the hostnames whose token hash changed (rotated) since they connected. */
export async function revokedTunnelHostnames(
  db: Queryable,
  connections: Array<{ hostname: string; tokenHash: string }>,
): Promise<string[]> {
  if (connections.length === 0) return [];
  const rows = await db.query<{ tunnel_hostname: string; tunnel_token_hash: string | null }>(
    'SELECT tunnel_hostname, tunnel_token_hash FROM bots WHERE tunnel_hostname = ANY($1::text[])',
    [connections.map((c) => c.hostname)],
  );
  const current = new Map(rows.map((r) => [r.tunnel_hostname, r.tunnel_token_hash]));
  return connections.filter((c) => current.get(c.hostname) !== c.tokenHash).map((c) => c.hostname);
}

/**
 * Issues a new tunnel token (shown once). The old one stops working at once: the caller closes the
 * connected client on this instance, and other relay instances drop it at their next revalidation.
 */
export async function rotateTunnelToken(ctx: AppContext, ownerId: string, botId: string) {
  const now = ctx.clock.now();
  const token = `svc_tun_${randomHex(24)}`;
  const bot = await ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    const row = (
      await tx.query<{
        tunnel_hostname: string | null;
        local_port: number | null;
        webhook_path: string | null;
      }>('SELECT tunnel_hostname, local_port, webhook_path FROM bots WHERE id = $1', [botId])
    )[0]!;
    if (!row.tunnel_hostname) {
      throw new ApiError('conflict', 'This bot has a callback_url and no managed tunnel.');
    }
    await tx.query('UPDATE bots SET tunnel_token_hash = $2 WHERE id = $1', [botId, sha256Hex(token)]);
    await audit(tx, { ownerId, botId, action: 'tunnel_token.rotated', at: now });
    return row;
  });
  return {
    hostname: bot.tunnel_hostname!,
    result: {
      bot_id: botId,
      tunnel_token: token,
      tunnel_client_command: tunnelClientCommand(
        ctx.config.baseUrl,
        bot.local_port ?? 8080,
        bot.webhook_path ?? '/webhook',
      ),
      note: `Shown once. The previous tunnel token no longer works and its client was disconnected. Run the command with ${TUNNEL_TOKEN_ENV} set to the new tunnel_token (or pass --token-file FILE).`,
    },
  };
}
