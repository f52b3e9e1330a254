import type { AppContext } from '../platform/context.ts';
import { sha256Hex } from '../platform/crypto.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError, notFound } from '../platform/errors.ts';
import { iso } from '../platform/time.ts';
import { createOwnerToken } from './auth.ts';
import { audit } from './audit.ts';
import { present } from '../platform/present.ts';
import { displayText } from '../platform/text.ts';

// Owner API tokens as the owner manages them (dashboard settings page and /api/v1/owner/tokens):
// create with a name (the raw token is returned once and stored only as its SHA-256 hash), list
// with prefix and last use, revoke. `botpay owner token create` makes the first one.

/** Active tokens an owner may hold at once: enough for every machine, few enough to review. */
export const MAX_ACTIVE_OWNER_TOKENS = 25;

export interface OwnerTokenView {
  token_id: string;
  name: string;
  token_prefix: string;
  created_at: string;
  last_used_at: string | null;
}

type TokenRow = {
  id: string;
  label: string | null;
  token_prefix: string;
  created_at: Date;
  last_used_at: Date | null;
};

function view(row: TokenRow): OwnerTokenView {
  return {
    token_id: row.id,
    name: row.label ?? '',
    token_prefix: row.token_prefix,
    created_at: iso(row.created_at),
    last_used_at: row.last_used_at ? iso(row.last_used_at) : null,
  };
}

/** The owner's active tokens, newest first (never the token itself: only its hash is stored). */
export async function listOwnerTokens(db: Queryable, ownerId: string): Promise<OwnerTokenView[]> {
  const rows = await db.query<TokenRow>(
    `SELECT id, label, token_prefix, created_at, last_used_at FROM owner_tokens
      WHERE owner_id = $1 AND revoked_at IS NULL ORDER BY created_at DESC, id DESC`,
    [ownerId],
  );
  return rows.map(view);
}

/** Creates a named token; the result carries the raw token, which nobody can read again. */
export async function createNamedOwnerToken(
  ctx: AppContext,
  ownerId: string,
  name: string,
): Promise<OwnerTokenView & { token: string }> {
  const trimmed = displayText(name, 'name', 100);
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    // Serialises concurrent creations of one owner, so the cap below holds.
    await tx.query('SELECT id FROM owners WHERE id = $1 FOR UPDATE', [ownerId]);
    const [count] = await tx.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM owner_tokens WHERE owner_id = $1 AND revoked_at IS NULL',
      [ownerId],
    );
    if ((count?.n ?? 0) >= MAX_ACTIVE_OWNER_TOKENS) {
      throw new ApiError(
        'conflict',
        `You have ${MAX_ACTIVE_OWNER_TOKENS} active tokens, the most allowed. Revoke one you no longer use first.`,
      );
    }
    const token = await createOwnerToken(tx, ownerId, now, trimmed);
    const row = await maybeOne<TokenRow>(
      tx,
      'SELECT id, label, token_prefix, created_at, last_used_at FROM owner_tokens WHERE token_hash = $1',
      [sha256Hex(token)],
    );
    const created = view(present(row, 'the token row just written'));
    await audit(tx, {
      ownerId,
      action: 'owner.token_created',
      details: { token_id: created.token_id, name: created.name, token_prefix: created.token_prefix },
      at: now,
    });
    return { ...created, token };
  });
}

/** Revokes one of the owner's active tokens; another owner's, unknown or revoked ids are 404. */
export async function revokeOwnerToken(
  ctx: AppContext,
  ownerId: string,
  tokenId: string,
): Promise<{ token_id: string; revoked_at: string }> {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    const row = await maybeOne<{ id: string; label: string | null; token_prefix: string }>(
      tx,
      `UPDATE owner_tokens SET revoked_at = $3 WHERE id = $1 AND owner_id = $2 AND revoked_at IS NULL
        RETURNING id, label, token_prefix`,
      [tokenId, ownerId, new Date(now)],
    );
    if (!row) throw notFound('Token');
    await audit(tx, {
      ownerId,
      action: 'owner.token_revoked',
      details: { token_id: row.id, name: row.label ?? '', token_prefix: row.token_prefix },
      at: now,
    });
    return { token_id: row.id, revoked_at: iso(new Date(now)) };
  });
}
