import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { iso } from '../platform/time.ts';
import { assertOwnedBot } from './locks.ts';

/**
 * Every action written to `audit_log`. `audit()` takes only these, and the dashboard's activity
 * view has wording for each (a `Record<AuditAction, string>`, checked by test/dashboard/auditWords.test.ts).
 */
export const AUDIT_ACTIONS = [
  'bot.claimed',
  'bot.paired',
  'pairing_code.created',
  'wallet.funded',
  'wallet.frozen',
  'wallet.unfrozen',
  'rail.updated',
  'x402.key_created',
  'x402.key_imported',
  'x402.settings_updated',
  'master_guardrails.updated',
  'api_key.rotated',
  'webhook_secret.rotated',
  'owner.signed_in',
  'owner.signed_out',
  'owner.token_created',
  'owner.token_revoked',
  'card.started',
  'card.activated',
  'card.updated',
  'card.profile_updated',
  'purchase.approved',
  'purchase.denied',
  'topup.approved',
  'topup.declined',
  'webhook_delivery.retried',
  'tunnel_token.rotated',
  'tunnel.forward_changed',
  'schedule.created',
  'schedule.paused',
  'schedule.resumed',
  'schedule.deleted',
] as const;

export type AuditAction = (typeof AUDIT_ACTIONS)[number];

/** The largest `details` an audit row keeps, as JSON text (characters). */
export const AUDIT_DETAILS_MAX = 4096;
const AUDIT_TEXT_MAX = 500;
const AUDIT_LIST_MAX = 100;

/**
 * `details` as stored: callers pass the fields they know (never a request body as given), and this
 * bounds what they pass whatever it is: strings cut at 500 characters, lists at 100 items, nesting
 * at 3 levels, and the whole at AUDIT_DETAILS_MAX (later keys dropped, `truncated: true` said).
 */
export function boundedAuditDetails(details: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  let size = 2;
  for (const [key, value] of Object.entries(details)) {
    const bounded = boundValue(value, 0);
    const entry = JSON.stringify({ [key.slice(0, 100)]: bounded }).length;
    if (size + entry > AUDIT_DETAILS_MAX - 20) {
      out.truncated = true;
      break;
    }
    out[key.slice(0, 100)] = bounded;
    size += entry;
  }
  return out;
}

function boundValue(value: unknown, depth: number): unknown {
  if (typeof value === 'string')
    return value.length > AUDIT_TEXT_MAX ? `${value.slice(0, AUDIT_TEXT_MAX)}…` : value;
  if (value === null || typeof value === 'number' || typeof value === 'boolean') return value;
  if (value === undefined) return null;
  if (depth >= 2) return '…';
  if (Array.isArray(value)) return value.slice(0, AUDIT_LIST_MAX).map((item) => boundValue(item, depth + 1));
  if (typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value)
        .slice(0, AUDIT_LIST_MAX)
        .map(([k, v]) => [k.slice(0, 100), boundValue(v, depth + 1)]),
    );
  }
  return String(value).slice(0, AUDIT_TEXT_MAX);
}

/** One `audit_log` row, in the caller's transaction (the change and its record commit together). */
export async function audit(
  tx: Queryable,
  entry: {
    ownerId: string | null;
    botId?: string | null;
    action: AuditAction;
    details?: Record<string, unknown>;
    at: number;
  },
): Promise<void> {
  await tx.query(
    'INSERT INTO audit_log (owner_id, bot_id, action, details, created_at) VALUES ($1,$2,$3,$4,$5)',
    [
      entry.ownerId,
      entry.botId ?? null,
      entry.action,
      JSON.stringify(boundedAuditDetails(entry.details ?? {})),
      new Date(entry.at),
    ],
  );
}

/** A bot's audit log, newest first (404 for a bot the owner does not own). */
export async function listAudit(ctx: AppContext, ownerId: string, botId: string, limit: number) {
  await assertOwnedBot(ctx.db, ownerId, botId);
  const rows = await ctx.db.query<{
    id: number;
    action: string;
    details: Record<string, unknown>;
    created_at: Date;
  }>(
    'SELECT id, action, details, created_at FROM audit_log WHERE bot_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2',
    [botId, limit],
  );
  return {
    entries: rows.map((r) => ({
      id: Number(r.id),
      action: r.action,
      details: r.details,
      created_at: iso(r.created_at),
    })),
  };
}

/** The owner's whole audit log, newest first, with the name of the bot of each entry. */
export async function listAccountAudit(ctx: AppContext, ownerId: string, limit: number) {
  const rows = await ctx.db.query<{
    action: string;
    details: unknown;
    created_at: Date;
    bot_name: string | null;
    bot_id: string | null;
  }>(
    `SELECT a.action, a.details, a.created_at, b.name AS bot_name, b.id AS bot_id
       FROM audit_log a LEFT JOIN bots b ON b.id = a.bot_id AND b.owner_id = a.owner_id
      WHERE a.owner_id = $1 ORDER BY a.created_at DESC, a.id DESC LIMIT $2`,
    [ownerId, limit],
  );
  return rows.map((r) => ({ ...r, created_at: iso(r.created_at) }));
}

/**
 * Names of records that audit entries refer to (cards, purchases, schedules, webhook deliveries),
 * looked up for this owner only: id → words. Ids of other owners' records find nothing.
 */
export async function auditRecordNames(
  ctx: AppContext,
  ownerId: string,
  ids: readonly string[],
): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  if (ids.length === 0) return names;
  const rows = await ctx.db.query<{ id: string; name: string }>(
    `SELECT c.id, coalesce(c.label, 'Card') AS name FROM cards c JOIN bots b ON b.id = c.bot_id
      WHERE c.id = ANY($1::text[]) AND b.owner_id = $2
     UNION ALL
     SELECT k.id, k.item_name || ' at ' || k.merchant_name FROM checkout_confirmations k
      WHERE k.id = ANY($1::text[]) AND k.owner_id = $2
     UNION ALL
     SELECT s.id, coalesce(s.instructions->>'item_name', 'schedule') || ' (' || s.cron || ')' FROM task_schedules s
      WHERE s.id = ANY($1::text[]) AND s.owner_id = $2
     UNION ALL
     SELECT d.id, d.event_type || ' delivery' FROM webhook_deliveries d JOIN bots b ON b.id = d.bot_id
      WHERE d.id = ANY($1::text[]) AND b.owner_id = $2`,
    [[...ids], ownerId],
  );
  for (const r of rows) names.set(r.id, r.name);
  return names;
}
