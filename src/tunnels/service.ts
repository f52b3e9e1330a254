import { TUNNEL_TOKEN_ENV, tunnelClientCommand, tunnelWebhookUrl } from '../bots/tunnelSetup.ts';
import { audit } from '../owners/audit.ts';
import { lockOwnedBot } from '../owners/locks.ts';
import type { AppContext } from '../platform/context.ts';
import { randomHex, sha256Hex } from '../platform/crypto.ts';
import { maybeOne, one, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { present } from '../platform/present.ts';

const TUNNEL_TOKEN = /^svc_tun_[0-9a-f]{48}$/;

export type TunnelForward = 'webhook_only' | 'all';

/** What a tunnel passes on to the bot's machine. */
export interface TunnelPolicy {
  forward: TunnelForward;
  /** The bot's webhook path: with 'webhook_only', the one path (and POST) forwarded. */
  webhookPath: string;
}

export interface TunnelBot extends TunnelPolicy {
  id: string;
  hostname: string;
  tokenHash: string;
}

type PolicyRow = {
  tunnel_forward: TunnelForward;
  webhook_path: string | null;
};

const policyOf = (row: PolicyRow): TunnelPolicy => ({
  forward: row.tunnel_forward === 'all' ? 'all' : 'webhook_only',
  webhookPath: row.webhook_path ?? '/webhook',
});

/** The bot a tunnel token belongs to, or null. A token only ever yields its own bot's hostname. */
export async function authenticateTunnelToken(db: Queryable, token: string): Promise<TunnelBot | null> {
  if (!TUNNEL_TOKEN.test(token)) return null;
  const tokenHash = sha256Hex(token);
  const row = await maybeOne<{ id: string; tunnel_hostname: string } & PolicyRow>(
    db,
    `SELECT id, tunnel_hostname, tunnel_forward, webhook_path FROM bots
      WHERE tunnel_token_hash = $1 AND tunnel_hostname IS NOT NULL`,
    [tokenHash],
  );
  return row ? { id: row.id, hostname: row.tunnel_hostname, tokenHash, ...policyOf(row) } : null;
}

/**
 * The relay's periodic check of its connections: the hostnames whose token hash changed (rotated)
 * since they connected, and the current forwarding policy of the others (changed on any instance).
 */
export async function revalidateTunnels(
  db: Queryable,
  connections: Array<{ hostname: string; tokenHash: string }>,
): Promise<{ revoked: string[]; policies: Map<string, TunnelPolicy> }> {
  const policies = new Map<string, TunnelPolicy>();
  if (connections.length === 0) return { revoked: [], policies };
  const rows = await db.query<{ tunnel_hostname: string; tunnel_token_hash: string | null } & PolicyRow>(
    `SELECT tunnel_hostname, tunnel_token_hash, tunnel_forward, webhook_path FROM bots
      WHERE tunnel_hostname = ANY($1::text[])`,
    [connections.map((c) => c.hostname)],
  );
  const current = new Map(rows.map((r) => [r.tunnel_hostname, r]));
  const revoked: string[] = [];
  for (const c of connections) {
    const row = current.get(c.hostname);
    if (!row || row.tunnel_token_hash !== c.tokenHash) revoked.push(c.hostname);
    else policies.set(c.hostname, policyOf(row));
  }
  return { revoked, policies };
}

export interface TunnelSettings {
  bot_id: string;
  webhook_url: string;
  webhook_path: string;
  local_port: number;
  forward: TunnelForward;
}

async function tunnelRow(db: Queryable, botId: string) {
  const row = await one<{ tunnel_hostname: string | null; local_port: number | null } & PolicyRow>(
    db,
    'SELECT tunnel_hostname, local_port, webhook_path, tunnel_forward FROM bots WHERE id = $1',
    [botId],
  );
  if (!row.tunnel_hostname) {
    throw new ApiError('conflict', 'This bot has a callback_url and no managed tunnel.');
  }
  return row;
}

function settings(
  ctx: AppContext,
  botId: string,
  row: Awaited<ReturnType<typeof tunnelRow>>,
): TunnelSettings {
  const policy = policyOf(row);
  return {
    bot_id: botId,
    webhook_url: tunnelWebhookUrl(
      ctx.config.baseUrl,
      present(row.tunnel_hostname, 'the tunnel hostname'),
      policy.webhookPath,
    ),
    webhook_path: policy.webhookPath,
    local_port: row.local_port ?? 8080,
    forward: policy.forward,
  };
}

/** The bot's tunnel settings (owner API). */
export async function getTunnelSettings(ctx: AppContext, ownerId: string, botId: string) {
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    return settings(ctx, botId, await tunnelRow(tx, botId));
  });
}

/** Changes what the tunnel forwards; audited. The caller applies it to this instance's relay at once. */
export async function setTunnelForward(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  forward: TunnelForward,
): Promise<{ hostname: string; policy: TunnelPolicy; result: TunnelSettings }> {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    const before = await tunnelRow(tx, botId);
    if (before.tunnel_forward !== forward) {
      await tx.query('UPDATE bots SET tunnel_forward = $2 WHERE id = $1', [botId, forward]);
      await audit(tx, {
        ownerId,
        botId,
        action: 'tunnel.forward_changed',
        details: { from: before.tunnel_forward, to: forward },
        at: now,
      });
    }
    const row = { ...before, tunnel_forward: forward };
    return {
      hostname: present(row.tunnel_hostname, 'the tunnel hostname'),
      policy: policyOf(row),
      result: settings(ctx, botId, row),
    };
  });
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
    const row = await one<{
      tunnel_hostname: string | null;
      local_port: number | null;
      webhook_path: string | null;
    }>(tx, 'SELECT tunnel_hostname, local_port, webhook_path FROM bots WHERE id = $1', [botId]);
    if (!row.tunnel_hostname) {
      throw new ApiError('conflict', 'This bot has a callback_url and no managed tunnel.');
    }
    await tx.query('UPDATE bots SET tunnel_token_hash = $2 WHERE id = $1', [botId, sha256Hex(token)]);
    await audit(tx, { ownerId, botId, action: 'tunnel_token.rotated', at: now });
    return row;
  });
  return {
    hostname: present(bot.tunnel_hostname, 'the tunnel hostname'),
    result: {
      bot_id: botId,
      tunnel_token: token,
      tunnel_client_command: tunnelClientCommand(
        ctx.config.baseUrl,
        bot.local_port ?? 8080,
        bot.webhook_path ?? '/webhook',
        token,
      ),
      note: `Shown once. The previous tunnel token no longer works and its client was disconnected. Run tunnel_client_command as printed: it passes the new token in ${TUNNEL_TOKEN_ENV} (or put it in a file and use --token-file FILE).`,
    },
  };
}
