import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../platform/context.ts';
import { randomHex, sha256Hex } from '../platform/crypto.ts';
import { maybeOne } from '../platform/db/port.ts';
import type { DashboardSession } from './sessions.ts';

// One-time flashes for post/redirect/get. A POST that has something to show once stores it
// (encrypted, bound to the browser's session or pre-sign-in cookie) and redirects to a page with
// `?flash=<id>`; that GET takes the row (DELETE … RETURNING), so reloading the page neither shows
// the secret again nor repeats the action. Table: migration 0017.

/** How long a flash waits for its redirect to be followed. */
export const FLASH_TTL_MS = 10 * 60_000;

export type FlashPayload =
  | { kind: 'api_key'; bot_id: string; value: string }
  | { kind: 'webhook_secret'; bot_id: string; value: string }
  | { kind: 'pairing_code'; value: string; expires_at: string }
  | { kind: 'check_email'; email: string }
  /** A message that depends on what was saved (e.g. limits out of order). */
  | { kind: 'notice'; level: 'ok' | 'warn'; text: string }
  /** The outcome of a one-click decision from the approval e-mail. */
  | { kind: 'decided'; title: string; text: string };

/** Whose flashes these are: the session, else the pre-sign-in cookie; undefined when neither. */
export function flashHolder(request: FastifyRequest): string | undefined {
  if (request.dashboard) return sessionFlashHolder(request.dashboard);
  if (request.preSessionId) return sha256Hex(`pre:${request.preSessionId}`);
  return undefined;
}

/** The flashes of a signed-in owner's session (what `flashHolder` answers for it). */
export function sessionFlashHolder(session: DashboardSession): string {
  return sha256Hex(`session:${session.idHash}`);
}

export async function putFlash(ctx: AppContext, holder: string, payload: FlashPayload): Promise<string> {
  const now = ctx.clock.now();
  const id = randomHex(16);
  await ctx.db.transaction(async (tx) => {
    // Flashes nobody came back for do not pile up.
    await tx.query('DELETE FROM dashboard_flashes WHERE expires_at < $1', [new Date(now)]);
    await tx.query(
      `INSERT INTO dashboard_flashes (id, holder_hash, payload_enc, created_at, expires_at)
       VALUES ($1,$2,$3,$4,$5)`,
      [id, holder, ctx.secrets.encrypt(JSON.stringify(payload)), new Date(now), new Date(now + FLASH_TTL_MS)],
    );
  });
  return id;
}

/** Takes (and so consumes) the flash: the second call with the same id finds nothing. */
export async function takeFlash(
  ctx: AppContext,
  holder: string | undefined,
  id: string | undefined,
): Promise<FlashPayload | undefined> {
  if (!holder || !id || !/^[0-9a-f]{32}$/.test(id)) return undefined;
  const row = await maybeOne<{ payload_enc: string; expires_at: Date }>(
    ctx.db,
    'DELETE FROM dashboard_flashes WHERE id = $1 AND holder_hash = $2 RETURNING payload_enc, expires_at',
    [id, holder],
  );
  if (!row || new Date(row.expires_at).getTime() <= ctx.clock.now()) return undefined;
  return JSON.parse(ctx.secrets.decrypt(row.payload_enc)) as FlashPayload;
}

/**
 * The redirect after a save (post/redirect/get): to `target` with the warning as a one-time flash
 * when there is one, else with the fixed `?notice=` code.
 */
export async function redirectAfterSave(
  ctx: AppContext,
  session: DashboardSession,
  reply: FastifyReply,
  target: string,
  warning: string | undefined,
  notice: string,
): Promise<FastifyReply> {
  if (!warning) return reply.redirect(`${target}?notice=${notice}`, 303);
  const id = await putFlash(ctx, sessionFlashHolder(session), {
    kind: 'notice',
    level: 'warn',
    text: warning,
  });
  return reply.redirect(`${target}?flash=${id}`, 303);
}
