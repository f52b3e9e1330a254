import type { Config } from '../config.ts';
import { audit } from '../owners/audit.ts';
import { findOrCreateOwner } from '../owners/auth.ts';
import type { AppContext } from '../platform/context.ts';
import { constantTimeEqual, randomHex, sha256Hex } from '../platform/crypto.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { consumeRateLimit, rateLimited } from '../platform/rateLimit.ts';

// Owner sign-in for the dashboard: an e-mailed magic link (single use, 15 minutes) opens a browser
// session. Both secrets are random 256-bit values stored only as SHA-256 hashes. CSRF tokens are an
// HMAC of the session's hash under SECRET_KEY, so they need no storage and die with the session.

export const MAGIC_LINK_TTL_MS = 15 * 60_000;
/** A session ends 30 days after sign-in at the latest, or after 7 days without use. */
export const SESSION_TTL_MS = 30 * 86_400_000;
export const SESSION_IDLE_MS = 7 * 86_400_000;
/** last_seen_at is written at most this often per session (one write per page view would be waste). */
const TOUCH_INTERVAL_MS = 10 * 60_000;

export const SIGNIN_PER_EMAIL_PER_HOUR = 5;
export const SIGNIN_PER_IP_PER_HOUR = 20;

const EMAIL_PATTERN = /^[^\s@<>"',;]{1,64}@[^\s@<>"',;]+\.[^\s@<>"',;]{2,}$/;
const TOKEN_PATTERN = /^[0-9a-f]{64}$/;

export function isSecureBaseUrl(config: Pick<Config, 'baseUrl'>): boolean {
  return config.baseUrl.startsWith('https://');
}

/** `__Host-` names are bound to this exact origin by the browser; they require Secure. */
export function sessionCookieName(config: Pick<Config, 'baseUrl'>): string {
  return isSecureBaseUrl(config) ? '__Host-botpay_session' : 'botpay_session';
}

export function preSessionCookieName(config: Pick<Config, 'baseUrl'>): string {
  return isSecureBaseUrl(config) ? '__Host-botpay_pre' : 'botpay_pre';
}

export function isValidEmail(email: string): boolean {
  return email.length <= 254 && EMAIL_PATTERN.test(email);
}

export interface DashboardSession {
  idHash: string;
  ownerId: string;
  email: string;
  csrfToken: string;
  /** Purchases waiting in the approvals inbox (set per page view for the navigation badge). */
  pendingApprovals?: number;
}

export function sessionCsrfToken(ctx: AppContext, idHash: string): string {
  return ctx.secrets.sign(`csrf:session:${idHash}`);
}

/** Token for forms shown before sign-in, tied to a random pre-session cookie (login CSRF). */
export function preSessionCsrfToken(ctx: AppContext, preSessionId: string): string {
  return ctx.secrets.sign(`csrf:pre:${preSessionId}`);
}

export function csrfMatches(expected: string, given: unknown): boolean {
  return typeof given === 'string' && given.length > 0 && constantTimeEqual(expected, given);
}

/**
 * Creates a magic link for the address and mails it. Counted against the address and the client
 * address; over the limit nothing is created or sent. Answers the same whether or not an owner
 * with this address exists (no account enumeration).
 */
export async function requestMagicLink(
  ctx: AppContext,
  input: { email: string; ip: string; returnTo?: string | undefined },
): Promise<void> {
  const email = input.email.trim();
  const normalized = email.toLowerCase();
  const now = ctx.clock.now();
  const token = randomHex(32);
  await ctx.db.transaction(async (tx) => {
    for (const [key, limit] of [
      [`signin-ip:${input.ip}`, SIGNIN_PER_IP_PER_HOUR],
      [`signin-email:${normalized}`, SIGNIN_PER_EMAIL_PER_HOUR],
    ] as const) {
      const result = await consumeRateLimit(tx, { key, limit, windowSeconds: 3600, now });
      // Throwing rolls back the hit already counted for the other key.
      if (!result.ok)
        throw rateLimited(
          result.retryAfterSeconds,
          'Too many sign-in links were requested. Try again later.',
        );
    }
    await tx.query(
      `INSERT INTO magic_links (token_hash, email, email_normalized, return_to_enc, requested_ip, created_at, expires_at)
       VALUES ($1,$2,$3,$4,$5,$6,$7)`,
      [
        sha256Hex(token),
        email,
        normalized,
        input.returnTo ? ctx.secrets.encrypt(input.returnTo) : null,
        input.ip,
        new Date(now),
        new Date(now + MAGIC_LINK_TTL_MS),
      ],
    );
  });
  const link = `${ctx.config.baseUrl}/signin/verify?token=${token}`;
  try {
    await ctx.mailer.send({
      to: email,
      subject: 'Your sign-in link for Bot Payment Service',
      text:
        `Open this link to sign in to your Bot Payment Service dashboard:\n\n${link}\n\n` +
        'It works once, for 15 minutes. If you did not ask for it, ignore this message: nobody can sign in without the link.',
      devNotice: `Sign-in link for ${email} (works once, for 15 minutes): ${link}`,
    });
  } catch (error) {
    ctx.logger.error({ err: error }, 'could not send the sign-in mail');
    throw new ApiError('service_unavailable', 'The sign-in mail could not be sent. Try again in a minute.');
  }
}

export type MagicLinkState = 'valid' | 'expired' | 'used' | 'unknown';

/** What a link is, without using it (the confirmation page shows the right words). */
export async function inspectMagicLink(ctx: AppContext, token: string): Promise<MagicLinkState> {
  if (!TOKEN_PATTERN.test(token)) return 'unknown';
  const row = await maybeOne<{ expires_at: Date; used_at: Date | null }>(
    ctx.db,
    'SELECT expires_at, used_at FROM magic_links WHERE token_hash = $1',
    [sha256Hex(token)],
  );
  if (!row) return 'unknown';
  if (row.used_at) return 'used';
  if (new Date(row.expires_at).getTime() <= ctx.clock.now()) return 'expired';
  return 'valid';
}

export type SignInResult =
  | { ok: true; sessionId: string; ownerId: string; returnTo: string | undefined }
  | { ok: false; reason: Exclude<MagicLinkState, 'valid'> };

/**
 * Uses the link (once: the UPDATE … WHERE used_at IS NULL lets exactly one of two concurrent
 * requests through), finds or creates the owner and opens a session.
 */
export async function signInWithMagicLink(
  ctx: AppContext,
  token: string,
  meta: { ip: string; userAgent: string | undefined; replacesSessionHash?: string | undefined },
): Promise<SignInResult> {
  if (!TOKEN_PATTERN.test(token)) return { ok: false, reason: 'unknown' };
  const now = ctx.clock.now();
  const result = await ctx.db.transaction(async (tx): Promise<SignInResult> => {
    const link = await maybeOne<{ email: string; return_to_enc: string | null }>(
      tx,
      `UPDATE magic_links SET used_at = $2
        WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2
        RETURNING email, return_to_enc`,
      [sha256Hex(token), new Date(now)],
    );
    if (!link) return { ok: false, reason: await failureReason(tx, token, now) };
    const owner = await findOrCreateOwner(tx, link.email, now);
    // Signing in again in the same browser replaces its session rather than leaving one behind.
    if (meta.replacesSessionHash) {
      await tx.query('UPDATE owner_sessions SET revoked_at = $2 WHERE id_hash = $1 AND revoked_at IS NULL', [
        meta.replacesSessionHash,
        new Date(now),
      ]);
    }
    const sessionId = randomHex(32);
    await tx.query(
      `INSERT INTO owner_sessions (id_hash, owner_id, created_at, last_seen_at, expires_at, ip, user_agent)
       VALUES ($1,$2,$3,$3,$4,$5,$6)`,
      [
        sha256Hex(sessionId),
        owner.id,
        new Date(now),
        new Date(now + SESSION_TTL_MS),
        meta.ip,
        meta.userAgent?.slice(0, 300) ?? null,
      ],
    );
    await audit(tx, { ownerId: owner.id, action: 'owner.signed_in', details: { ip: meta.ip }, at: now });
    return {
      ok: true,
      sessionId,
      ownerId: owner.id,
      returnTo: link.return_to_enc ? ctx.secrets.decrypt(link.return_to_enc) : undefined,
    };
  });
  return result;
}

async function failureReason(
  tx: Queryable,
  token: string,
  now: number,
): Promise<Exclude<MagicLinkState, 'valid'>> {
  const row = await maybeOne<{ expires_at: Date; used_at: Date | null }>(
    tx,
    'SELECT expires_at, used_at FROM magic_links WHERE token_hash = $1',
    [sha256Hex(token)],
  );
  if (!row) return 'unknown';
  if (row.used_at) return 'used';
  return new Date(row.expires_at).getTime() <= now ? 'expired' : 'unknown';
}

/** The live session for a raw cookie value, or undefined (unknown, signed out, expired, idle too long). */
export async function loadSession(
  ctx: AppContext,
  rawSessionId: string | undefined,
): Promise<DashboardSession | undefined> {
  if (!rawSessionId || !TOKEN_PATTERN.test(rawSessionId)) return undefined;
  const now = ctx.clock.now();
  const idHash = sha256Hex(rawSessionId);
  const row = await maybeOne<{ owner_id: string; email: string; last_seen_at: Date }>(
    ctx.db,
    `SELECT s.owner_id, o.email, s.last_seen_at FROM owner_sessions s JOIN owners o ON o.id = s.owner_id
      WHERE s.id_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > $2 AND s.last_seen_at > $3`,
    [idHash, new Date(now), new Date(now - SESSION_IDLE_MS)],
  );
  if (!row) return undefined;
  if (now - new Date(row.last_seen_at).getTime() > TOUCH_INTERVAL_MS) {
    await ctx.db.query('UPDATE owner_sessions SET last_seen_at = $2 WHERE id_hash = $1', [
      idHash,
      new Date(now),
    ]);
  }
  return { idHash, ownerId: row.owner_id, email: row.email, csrfToken: sessionCsrfToken(ctx, idHash) };
}

export async function signOut(ctx: AppContext, session: DashboardSession): Promise<void> {
  const now = ctx.clock.now();
  await ctx.db.transaction(async (tx) => {
    await tx.query('UPDATE owner_sessions SET revoked_at = $2 WHERE id_hash = $1 AND revoked_at IS NULL', [
      session.idHash,
      new Date(now),
    ]);
    await audit(tx, { ownerId: session.ownerId, action: 'owner.signed_out', at: now });
  });
}

/** Deletes links and sessions that can no longer be used (periodic job). */
export async function pruneSignInRecords(db: Queryable, now: number): Promise<void> {
  const dayAgo = new Date(now - 86_400_000);
  await db.query('DELETE FROM magic_links WHERE expires_at < $1', [dayAgo]);
  await db.query('DELETE FROM owner_sessions WHERE expires_at < $1 OR revoked_at < $1 OR last_seen_at < $2', [
    dayAgo,
    new Date(now - SESSION_IDLE_MS - 86_400_000),
  ]);
}
