import { IDEMPOTENCY_TTL_MS } from '../spend/idempotency.ts';
import type { Config } from '../config.ts';
import type { AppContext } from '../platform/context.ts';
import type { Queryable } from '../platform/db/port.ts';
import { intervalJob } from './runner.ts';
import { present } from '../platform/present.ts';

// Data retention: what is deleted, and when. RETENTION below is the whole pruned set; a table that
// is not listed is never pruned here (docs/deploy.md, "Data retention", lists every table). Money
// history is permanent: ledger_transactions and ledger_entries are append-only (a trigger refuses
// deletes), and checkout confirmations, top-up requests and x402 payments are the purchase and
// funding history they belong to.
//
// Pruning walks each table along an indexed column that grows with time (`key`) in batches of
// BATCH rows: one short statement per batch, which locks only the rows it deletes and skips rows
// another transaction holds (FOR UPDATE SKIP LOCKED), so it never waits on a checkout or a
// delivery and never makes one wait for more than one batch. A walk stops at the first batch with
// nothing old enough in it. Several instances may prune at once: a row is deleted by exactly one.

export interface RetentionRule {
  table: string;
  /** Indexed column the walk follows; it grows with time unless `walkAll`. */
  key: string;
  /** SQL type of `key`. */
  keyType: 'bigint' | 'timestamptz' | 'text';
  /** The row's age is counted from this (SQL on the row, alias x). */
  time: string;
  /**
   * Walk the whole table (its key does not grow with time, e.g. one row per rate-limit key);
   * otherwise a walk stops at the first batch with nothing old enough in it.
   */
  walkAll?: boolean;
  /** How long a row is kept. */
  keepMs: (config: Config) => number;
  /** SQL that must also hold for the row (alias x; $4 is now) before it goes. */
  condition: string;
  /** Rows joined and locked with it (they must be deletable too: `d` is the joined row). */
  join?: string;
  /** Statements that delete the joined rows with it (CTEs over `doomed`). */
  alsoDelete?: string;
}

const DAY = 86_400_000;

/** A rule whose rows all go once old enough. */
function plain(
  table: string,
  key: string,
  keyType: RetentionRule['keyType'],
  time: string,
  keepMs: RetentionRule['keepMs'],
  walkAll = false,
): RetentionRule {
  return { table, key, keyType, time, keepMs, condition: 'true', walkAll };
}

export const RETENTION: readonly RetentionRule[] = [
  // An event goes with its delivery and every attempt of it, once the delivery is final (delivered,
  // failed or acknowledged), out of the webhook queue (no row there, leased or not: 0046), and its
  // last attempt is as old as the event must be.
  {
    table: 'events',
    key: 'seq',
    keyType: 'bigint',
    time: 'x.created_at',
    keepMs: (c) => c.deliveryLogRetentionDays * DAY,
    condition: `d.status <> 'pending' AND NOT EXISTS (SELECT 1 FROM webhook_queue q WHERE q.delivery_id = d.id)
      AND coalesce(d.last_attempt_at, d.created_at) < $2`,
    join: 'JOIN webhook_deliveries d ON d.event_id = x.id',
    alsoDelete: `gone_d AS (DELETE FROM webhook_deliveries d USING doomed WHERE d.ctid = doomed.dc RETURNING d.id),
  gone_a AS (DELETE FROM webhook_attempts a USING gone_d WHERE a.delivery_id = gone_d.id)`,
  },
  // One line each: table, walked key and its type, age from, kept for, walk the whole table.
  // Idempotency keys are honoured for 24 hours (src/spend/idempotency.ts).
  plain('checkout_idempotency', 'created_at', 'timestamptz', 'x.created_at', () => IDEMPOTENCY_TTL_MS),
  // The owner calls' keys (src/owners/idempotency.ts, migration 0029), the same 24 hours.
  plain('owner_idempotency', 'created_at', 'timestamptz', 'x.created_at', () => IDEMPOTENCY_TTL_MS),
  // A rate-limit key's row goes when its newest counted request left the longest window (a day):
  // its newest hit, or when a row of buckets last counted one (migration 0057).
  plain(
    'rate_limits',
    'key',
    'text',
    'greatest(x.last_at, (SELECT max(h) FROM unnest(x.hits) h))',
    () => DAY,
    true,
  ),
  // No longer written since migration 0020, which emptied it; listed so that nothing stays behind.
  plain('rate_limit_hits', 'id', 'bigint', 'x.at', () => DAY),
  plain('audit_log', 'id', 'bigint', 'x.created_at', (c) => c.auditLogRetentionDays * DAY),
];

export const BATCH = 1_000;

function batchSql(rule: RetentionRule): string {
  const joined = rule.join !== undefined;
  // $1 the walk's position (a plain range condition, so each batch starts in the index where the
  // last one ended), $2 the cut-off, $3 the batch size, $4 now.
  return `
WITH win AS (
  SELECT x.${rule.key} AS k, ${rule.time} AS t FROM ${rule.table} x
   WHERE x.${rule.key} > $1::text::${rule.keyType}
   ORDER BY x.${rule.key} LIMIT $3
), doomed AS (
  SELECT x.ctid AS c${joined ? ', d.ctid AS dc' : ''}
    FROM ${rule.table} x ${rule.join ?? ''}
   WHERE x.${rule.key} IN (SELECT k FROM win) AND coalesce(${rule.time}, '-infinity') < $2 AND (${rule.condition})
   FOR UPDATE OF x${joined ? ', d' : ''} SKIP LOCKED
),${rule.alsoDelete ? ` ${rule.alsoDelete},` : ''} gone AS (
  DELETE FROM ${rule.table} x USING doomed WHERE x.ctid = doomed.c RETURNING 1
)
SELECT (SELECT max(k)::text FROM win) AS last,
       (SELECT count(*)::int FROM win) AS seen,
       (SELECT count(*)::int FROM win WHERE coalesce(t, '-infinity') < $2) AS old,
       (SELECT count(*)::int FROM gone) AS deleted,
       $4::timestamptz AS at`;
}

/** Below every key of each type: where a walk starts. */
const WALK_START: Record<RetentionRule['keyType'], string> = {
  bigint: '-9223372036854775808',
  timestamptz: '-infinity',
  text: '',
};

const SQL = new Map(RETENTION.map((rule) => [rule, batchSql(rule)]));

export interface PruneOptions {
  batch?: number;
  /** Stop a table's walk after this many batches (the next run goes on). */
  maxBatches?: number;
  /** Called after every batch (tests and the benchmark). */
  onBatch?: (table: string, deleted: number) => void;
}

/** Deletes what RETENTION says is due; returns the rows deleted per table. */
export async function pruneExpired(
  db: Queryable,
  config: Config,
  now: number,
  options: PruneOptions = {},
): Promise<Record<string, number>> {
  const batch = options.batch ?? BATCH;
  const deleted: Record<string, number> = {};
  for (const rule of RETENTION) {
    const cutoff = new Date(now - rule.keepMs(config));
    let last: string = WALK_START[rule.keyType];
    let total = 0;
    for (let n = 0; n < (options.maxBatches ?? Number.POSITIVE_INFINITY); n++) {
      const rows: Array<{ last: string | null; seen: number; old: number; deleted: number }> = await db.query(
        present(SQL.get(rule), `the statement of ${rule.table}`),
        [last, cutoff, batch, new Date(now)],
      );
      const row = rows[0];
      total += row?.deleted ?? 0;
      options.onBatch?.(rule.table, row?.deleted ?? 0);
      if (!row || row.last === null || row.seen < batch || (row.old === 0 && !rule.walkAll)) break;
      last = row.last;
    }
    deleted[rule.table] = total;
  }
  return deleted;
}

/** Every instance with the worker role prunes hourly (safe in parallel, see above). */
export const retentionJob = intervalJob('data-retention', 'worker', 3_600_000, async (ctx: AppContext) => {
  const deleted = await pruneExpired(ctx.db, ctx.config, ctx.clock.now());
  ctx.logger.info({ deleted }, 'data retention: old rows deleted');
});
