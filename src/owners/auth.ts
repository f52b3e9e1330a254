import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../platform/context.ts';
import { randomHex, sha256Hex } from '../platform/crypto.ts';
import type { Queryable } from '../platform/db/port.ts';
import { authenticationRequired } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { present } from '../platform/present.ts';

export const OWNER_TOKEN_PATTERN = /^svc_owner_[0-9a-f]{48}$/;

export interface AuthenticatedOwner {
  id: string;
  email: string;
  /** How the request authenticated: browser sessions need CSRF checks, bearer tokens do not. */
  via: 'token' | 'session';
  /** The owner API token the request used (bearer only). */
  tokenId?: string;
}

/** last_used_at of an owner token is written at most this often (one write per request would be waste). */
export const TOKEN_TOUCH_INTERVAL_MS = 60_000;

declare module 'fastify' {
  interface FastifyRequest {
    owner?: AuthenticatedOwner;
  }
}

/** The owner the `/api/v1/owner/` hook authenticated (401 if a route outside it asks). */
export function ownerOf(request: FastifyRequest): AuthenticatedOwner {
  if (!request.owner) throw authenticationRequired();
  return request.owner;
}

/**
 * Other ways to authenticate an owner (the dashboard's session cookie). Each returns the owner, or
 * undefined when the request does not carry its kind of credential.
 */
export type OwnerAuthenticator = (request: FastifyRequest) => Promise<AuthenticatedOwner | undefined>;

export async function authenticateOwnerToken(
  ctx: AppContext,
  request: FastifyRequest,
): Promise<AuthenticatedOwner | undefined> {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return undefined;
  // The scheme name is case-insensitive (RFC 9110 §11.1).
  if (!/^bearer /i.test(header)) throw authenticationRequired();
  const token = header.slice(7).trim();
  if (!OWNER_TOKEN_PATTERN.test(token)) throw authenticationRequired();
  const rows = await ctx.db.query<{ id: string; email: string; token_id: string; last_used_at: Date | null }>(
    `SELECT o.id, o.email, t.id AS token_id, t.last_used_at FROM owner_tokens t JOIN owners o ON o.id = t.owner_id
      WHERE t.token_hash = $1 AND t.revoked_at IS NULL`,
    [sha256Hex(token)],
  );
  const row = rows[0];
  if (!row) throw authenticationRequired();
  // "Last used" for the owner's token list, written at most once a minute per token.
  const now = ctx.clock.now();
  if (!row.last_used_at || now - new Date(row.last_used_at).getTime() >= TOKEN_TOUCH_INTERVAL_MS) {
    await ctx.db.query(
      'UPDATE owner_tokens SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= $3)',
      [row.token_id, new Date(now), new Date(now - TOKEN_TOUCH_INTERVAL_MS)],
    );
  }
  return { id: row.id, email: row.email, via: 'token', tokenId: row.token_id };
}

/** Finds the owner with this e-mail, creating it (with default master guardrails) if needed. */
export async function findOrCreateOwner(
  tx: Queryable,
  email: string,
  now: number,
): Promise<{ id: string; email: string }> {
  const normalized = email.trim().toLowerCase();
  await tx.query(
    `INSERT INTO owners (id, email, email_normalized, created_at) VALUES ($1, $2, $3, $4)
     ON CONFLICT (email_normalized) DO NOTHING`,
    [newId('own'), email.trim(), normalized, new Date(now)],
  );
  const rows = await tx.query<{ id: string; email: string }>(
    'SELECT id, email FROM owners WHERE email_normalized = $1',
    [normalized],
  );
  return present(rows[0], 'the owner row just upserted');
}

/** Creates an owner API token; returns the raw token, which is shown once. */
export async function createOwnerToken(
  tx: Queryable,
  ownerId: string,
  now: number,
  label?: string,
): Promise<string> {
  const token = `svc_owner_${randomHex(24)}`;
  await tx.query(
    'INSERT INTO owner_tokens (id, owner_id, token_hash, token_prefix, label, created_at) VALUES ($1,$2,$3,$4,$5,$6)',
    [newId('otk'), ownerId, sha256Hex(token), token.slice(0, 14), label ?? null, new Date(now)],
  );
  return token;
}
