import { namedCall } from '../platform/db/named.ts';
import { type Db, pgErrorCode, prepared, type Queryable } from '../platform/db/port.ts';
import { type WindowKind, windowStart } from '../platform/time.ts';
import { type BatchItemAnswer, type SpendBatchOptions, SpendBatcher } from './batch.ts';
import type { Refusal } from './refusals.ts';

// The one call of the one guardrail chain, spend_run (src/migrations/functions/spend_run.sql),
// for both rails: a card purchase (src/checkout/attempt.ts) and an x402 payment
// (src/x402/service.ts). The parameters are passed by name from one object (the mapping below is
// the only place that knows the database's parameter names); the payment method — a card profile
// or a partner-wallet authorisation — is the only part that differs. The answer comes back as
// the function's jsonb: each rail reads its own fields, and the refusals both rails share are
// read here (sharedRefusal), so their figures have one reader.
//
// Two ways to call it: spendAlone, a statement on its own (one round trip, committed when it
// passes), and spendInTransaction, inside the caller's transaction (when the caller has more to
// write with it: a task's state, the low-balance event, an x402 signature).

/** What differs between the rails: the method and its own fields. */
export type SpendMethod =
  | {
      kind: 'card';
      /** The card the bot named; null: the bot's one active card. */
      cardId: string | null;
      profileIndex: number;
    }
  | {
      kind: 'partner_wallet';
      /** The x402 payment as chosen (spend_run's p_payment). */
      payment: {
        network: string;
        asset: string;
        pay_to: string;
        resource_url: string;
        resource_domain: string;
        description: string | null;
        amount_micro: string;
        requirements: unknown;
        x402_version: number;
        domain_check: 'claimed' | 'probed' | 'connected';
      };
      /** The owner's domain lists exclude resource_domain (judged in TypeScript: domainMatches). */
      domainRefused: boolean;
    };

export interface SpendParams {
  botId: string;
  method: SpendMethod;
  amountMicros: number;
  /** Trimmed; null when absent or blank ('x402' for an x402 payment). */
  category: string | null;
  /** The confirmation (and, for x402, payment) id (chk_…). */
  confirmationId: string;
  /** What the owner's inbox shows: the merchant (x402: the resource's domain), its URL, the item. */
  merchantName: string;
  merchantUrl: string;
  itemName: string;
  taskId: string | null;
  now: number;
  /** How long a held purchase waits for its owner (APPROVAL_WINDOW_SECONDS). */
  approvalWindowSeconds: number;
  /** The ledger transaction id (ltx_…) of the hold or debit. */
  ledgerTransactionId: string;
  /** The purchase.approved outbox row of a card purchase approved at once (null for x402). */
  eventId: string | null;
  eventBody: string | null;
  /** The rail's hourly limit (rate_limits key and its limit; the window is an hour). */
  rateKey: string;
  rateLimit: number;
  /** The Idempotency-Key (kept on the purchase's own row: a card's confirmation, an x402 payment's row), or null. */
  idempotencyKey: string | null;
  /** sha256 of the request; null without a key. */
  requestHash: string | null;
}

/** What the call adds to SpendParams (set by spendAlone and spendInTransaction). */
export interface CallParams extends SpendParams {
  /** Alone: the visible balance's low mark (crossing it needs the caller's transaction). */
  lowBalanceMicros: number | null;
  /** Whether the call announces its changes itself (botpay_notify), or leaves them to the caller. */
  announce: boolean;
}

const card = (p: CallParams) => (p.method.kind === 'card' ? p.method : null);
const wallet = (p: CallParams) => (p.method.kind === 'partner_wallet' ? p.method : null);

export const spendCall = namedCall<CallParams>('spend_run', {
  p_method: (p) => p.method.kind,
  p_bot_id: (p) => p.botId,
  p_card_id: (p) => card(p)?.cardId ?? null,
  p_profile_index: (p) => card(p)?.profileIndex ?? 0,
  p_amount: (p) => p.amountMicros,
  p_category: (p) => p.category,
  p_id: (p) => p.confirmationId,
  p_merchant_name: (p) => p.merchantName,
  p_merchant_url: (p) => p.merchantUrl,
  p_item_name: (p) => p.itemName,
  p_task_id: (p) => p.taskId,
  p_now: (p) => new Date(p.now),
  p_day: (p) => windowStart('day', p.now),
  p_week: (p) => windowStart('week', p.now),
  p_month: (p) => windowStart('month', p.now),
  p_window_seconds: (p) => p.approvalWindowSeconds,
  p_ledger_id: (p) => p.ledgerTransactionId,
  p_event_id: (p) => p.eventId,
  p_event_body: (p) => p.eventBody,
  p_rate_key: (p) => p.rateKey,
  p_rate_limit: (p) => p.rateLimit,
  p_idempotency_key: (p) => p.idempotencyKey,
  p_request_hash: (p) => p.requestHash,
  p_low_balance_micros: (p) => p.lowBalanceMicros,
  p_payment: (p) => {
    const w = wallet(p);
    return w ? JSON.stringify(w.payment) : null;
  },
  p_domain_refused: (p) => wallet(p)?.domainRefused ?? null,
  p_announce: (p) => p.announce,
});

/** SQLSTATE of a refusal (its message is the refusal), and of a purchase that needs a transaction. */
const REFUSED = 'BP001';
const NEEDS_TRANSACTION = 'BP002';

/** The function's answer: passed or replayed (`ok` true or a `replay`), or, refused, the refusal ({"error": …}). */
export interface SpendAnswer {
  refused: boolean;
  r: Record<string, unknown>;
}

/** Prepared once per connection (the named parameters cost a parse and a plan at every call). */
const SPEND_SQL = prepared(`SELECT ${spendCall.sql} AS r`);

/**
 * Runs the chain as one statement in its own transaction: one round trip, committed when it
 * passes, nothing written when it refuses. Null when the purchase would take the visible balance
 * below `lowBalanceMicros`: nothing was written, and the caller runs it with spendInTransaction
 * in a transaction that also writes the low-balance event.
 *
 * With `batch` (PostgreSQL), purchases that arrive while the instance's purchase calls are busy
 * share a transaction (src/spend/batch.ts): the same answers, one commit.
 */
export async function spendAlone(
  db: Db,
  params: SpendParams,
  lowBalanceMicros: number,
  batch?: SpendBatchOptions,
): Promise<SpendAnswer | null> {
  const announce = announcesItself(db);
  const call: CallParams = { ...params, lowBalanceMicros, announce };
  const answer =
    batch && batch.size > 1 && db.kind === 'postgres'
      ? await batchRun(db, batch, call)
      : await spendStatement(db, call);
  if (answer !== null && !announce && answer.r.ok === true)
    await db.announce(announcements(params, answer.r));
  return answer;
}

/**
 * Whether the call announces its changes itself. On PostgreSQL they are announced after the commit
 * (spendAlone): made by the call, each would be a NOTICE the server sends at once (spend_run.sql,
 * p_announce). PGlite has no NOTICEs to save: its call announces itself, one statement fewer.
 */
function announcesItself(db: Db): boolean {
  return db.kind === 'pglite';
}

/** One purchase as its own statement. */
async function spendStatement(db: Db, call: CallParams): Promise<SpendAnswer | null> {
  try {
    return answerOf(await db.write<{ r: Record<string, unknown> }>(SPEND_SQL, spendCall.params(call)));
  } catch (error) {
    if (pgErrorCode(error) === NEEDS_TRANSACTION) return null;
    return refusalOf(error);
  }
}

/** One purchase as an item of spend_run_batch: spend_run's parameters by name (dates as ISO text). */
export function batchItem(call: CallParams): Record<string, unknown> {
  const values = spendCall.params(call);
  return Object.fromEntries(spendCall.names.map((n, i) => [n, values[i]]));
}

const BATCH_SQL = prepared('SELECT spend_run_batch($1::jsonb) AS r');

/**
 * Several purchases in one transaction (spend_run_batch.sql), each answered as spendAlone's
 * statement would answer it, or 'later' (another purchase of its owner ran) or 'alone' (failed
 * otherwise: run it on its own). The batcher's call; the caller announces what passed.
 */
export function spendTogether(
  db: Db,
  list: SpendParams[],
  lowBalanceMicros: number,
): Promise<BatchItemAnswer<SpendAnswer | null>[]> {
  const announce = announcesItself(db);
  return spendBatch(
    db,
    list.map((params) => ({ ...params, lowBalanceMicros, announce })),
  );
}

async function spendBatch(db: Db, calls: CallParams[]): Promise<BatchItemAnswer<SpendAnswer | null>[]> {
  const rows = await db.write<{ r: unknown }>(BATCH_SQL, [JSON.stringify(calls.map(batchItem))]);
  const answers = rows[0]?.r;
  if (!Array.isArray(answers)) throw new Error('spend_run_batch returned no array');
  return answers.map((a: Record<string, unknown> | null): BatchItemAnswer<SpendAnswer | null> => {
    if (a?.later === true) return 'later';
    if (a?.r !== undefined) return { result: answerOf([{ r: a.r as Record<string, unknown> }]) };
    if (a?.sqlstate === NEEDS_TRANSACTION) return { result: null };
    if (a?.sqlstate === REFUSED && typeof a.message === 'string') {
      const refusal = refusalMessage(a.message);
      if (refusal) return { result: refusal };
    }
    // Any other error: its own statement answers it as it always has.
    return 'alone';
  });
}

interface Batching {
  batcher: SpendBatcher<CallParams, SpendAnswer | null>;
  /**
   * bot → owner, learned from passed purchases: a batch holds one purchase per owner (the key),
   * so that spend_run_batch rarely answers one `later`. A hint only: a bot not known yet is its own
   * key, and a stale one costs a `later`, never a wrong answer.
   */
  owners: Map<string, string>;
}

const BATCHERS = new WeakMap<Db, Batching>();
/** Bots whose owners a batcher remembers (the map starts afresh past it). */
const OWNER_HINTS = 100_000;

async function batchRun(db: Db, options: SpendBatchOptions, call: CallParams): Promise<SpendAnswer | null> {
  let b = BATCHERS.get(db);
  if (!b) {
    b = {
      batcher: new SpendBatcher(
        options,
        (c) => spendStatement(db, c),
        (calls) => spendBatch(db, calls),
      ),
      owners: new Map(),
    };
    BATCHERS.set(db, b);
  }
  const answer = await b.batcher.run(b.owners.get(call.botId) ?? `bot:${call.botId}`, call);
  const owner = answer?.r.owner_id;
  if (typeof owner === 'string' && b.owners.get(call.botId) !== `owner:${owner}`) {
    if (b.owners.size >= OWNER_HINTS) b.owners.clear();
    b.owners.set(call.botId, `owner:${owner}`);
  }
  return answer;
}

/** Waits (at most `timeoutMs`) until the database's purchase queue is empty and its calls ended. */
export function spendQueueIdle(db: Db, timeoutMs: number): Promise<void> {
  return BATCHERS.get(db)?.batcher.idle(timeoutMs) ?? Promise.resolve();
}

/** The purchase queue of a database's batcher (src/spend/batch.ts), for the load shedder and /metrics. */
export function spendQueueLoad(db: Db): ReturnType<SpendBatcher<unknown, unknown>['load']> {
  return (
    BATCHERS.get(db)?.batcher.load() ?? { waiting: 0, oldestWaitMs: 0, inFlight: 0, batches: 0, batched: 0 }
  );
}

/**
 * What a passed purchase announces (spend_run's botpay_notify calls, kept in step with them): its
 * bot's state, for the status and wallet caches of every instance, and for a card purchase approved
 * at once its purchase.approved event, to wake the delivery workers.
 */
function announcements(params: SpendParams, r: Record<string, unknown>): Array<[string, string]> {
  const out: Array<[string, string]> = [['botpay_bot_state', `bot:${params.botId}`]];
  if (params.method.kind === 'card' && r.held === false) out.unshift(['botpay_events', params.botId]);
  return out;
}

/** Runs the chain in the caller's transaction. On a refusal the caller must roll back (the call failed). */
export async function spendInTransaction(tx: Queryable, params: SpendParams): Promise<SpendAnswer> {
  try {
    return answerOf(
      await tx.query<{ r: Record<string, unknown> }>(
        SPEND_SQL,
        spendCall.params({ ...params, lowBalanceMicros: null, announce: true }),
      ),
    );
  } catch (error) {
    return refusalOf(error);
  }
}

function answerOf(rows: { r: Record<string, unknown> }[]): SpendAnswer {
  const r = rows[0]?.r;
  if (!r) throw new Error('spend_run returned no row');
  return { refused: false, r };
}

/** A refusal raised by the function, as its answer; any other error is thrown on. */
function refusalOf(error: unknown): SpendAnswer {
  if (pgErrorCode(error) !== REFUSED) throw error;
  const refusal = refusalMessage((error as Error).message);
  if (!refusal) throw error;
  return refusal;
}

/** A refusal's message ({"error": …}) as its answer; undefined when it is not one. */
function refusalMessage(message: string): SpendAnswer | undefined {
  let refusal: unknown;
  try {
    refusal = JSON.parse(message);
  } catch {
    return undefined;
  }
  if (typeof refusal !== 'object' || refusal === null || !('error' in refusal)) return undefined;
  return { refused: true, r: refusal as Record<string, unknown> };
}

const WINDOWS: readonly string[] = ['day', 'week', 'month'] satisfies WindowKind[];

/** Checks of the function's jsonb: anything unexpected is a programming error (500), never a guess. */
export function reader(r: Record<string, unknown>) {
  const bad = (): never => {
    throw new Error(`unexpected spend_run result ${JSON.stringify(r)}`);
  };
  const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : bad());
  const str = (v: unknown): string => (typeof v === 'string' ? v : bad());
  return {
    bad,
    num,
    str,
    strOrNull: (v: unknown): string | null => (v === null || v === undefined ? null : str(v)),
    bool: (v: unknown): boolean => (typeof v === 'boolean' ? v : bad()),
    windowKind: (v: unknown): WindowKind => (WINDOWS.includes(str(v)) ? (v as WindowKind) : bad()),
    obj: (v: unknown): Record<string, unknown> =>
      typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : bad(),
  };
}

/**
 * A refusal both rails share, read from the function's jsonb; undefined for a method's own refusal
 * (card_not_found, rail_not_active, …), which its rail reads.
 */
export function sharedRefusal(r: Record<string, unknown>): Refusal | undefined {
  const { num, windowKind } = reader(r);
  switch (r.error) {
    case 'wallet_not_active':
    case 'wallet_frozen':
    case 'idempotency_conflict':
      return { error: r.error };
    case 'insufficient_funds':
      return { error: 'insufficient_funds', balanceMicros: num(r.balance_micros) };
    case 'rate_limited':
      return { error: 'rate_limited', retryAfterSeconds: num(r.retry_after_seconds) };
    case 'limit':
      switch (r.name) {
        case 'card_per_transaction':
        case 'x402_per_transaction':
        case 'master_per_transaction':
          return { error: 'per_transaction', name: r.name, limitMicros: num(r.limit_micros) };
        case 'card_daily':
        case 'card_monthly':
        case 'x402_daily':
        case 'x402_monthly':
        case 'master_daily':
        case 'master_monthly':
          return {
            error: 'window_limit',
            name: r.name,
            limitMicros: num(r.limit_micros),
            spentMicros: num(r.spent_micros),
          };
        case 'profile_allowance':
          return {
            error: 'allowance',
            limitMicros: num(r.limit_micros),
            spentMicros: num(r.spent_micros),
            window: windowKind(r.window),
          };
      }
  }
  return undefined;
}
