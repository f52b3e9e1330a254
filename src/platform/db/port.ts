// The database port: the only way the service talks to storage. Two drivers implement it,
// PostgreSQL (`pg`) and embedded PGlite, with the same SQL and the same migrations.
//
// Rule for callers: inside `transaction(fn)`, use only the `tx` handed to `fn`. With PGlite a
// query on the outer `Db` while a transaction is open waits for that transaction: a deadlock.
//
// Every statement and transaction takes one of the instance's sessions with the database first
// (`gate.ts`): when none comes free within the configured wait it fails with OverloadedError,
// having run nothing, which the app answers `503 overloaded` with Retry-After.

import type { DbLoad } from './gate.ts';

export type Row = Record<string, unknown>;

export interface Queryable {
  query<T extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<T[]>;
  /** Runs a script of several statements without parameters (migrations, test resets). */
  exec(sql: string): Promise<void>;
}

export interface TransactionOptions {
  /** Retries on serialization failures and deadlocks (PostgreSQL 40001 / 40P01). Default 5. */
  retries?: number;
}

export interface Db extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  transaction<T>(fn: (tx: Queryable) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /**
   * One statement that writes, in a transaction of its own: committed when it succeeds, nothing
   * left when it fails. One round trip where `transaction` takes three (BEGIN, the statement,
   * COMMIT). For a statement `query` would take for a read (`SELECT fn(…)` of a function that
   * writes): its notifications are announced like a transaction's. Honours prepared(). Retried
   * on a deadlock or serialization failure, as `transaction` is.
   */
  write<T extends Row = Row>(sql: string, params?: readonly unknown[]): Promise<T[]>;
  /**
   * Subscribes to NOTIFY on a channel; returns an unsubscribe function. Notifications of this
   * process's own commits reach the handler before the committing call returns (caches read their
   * own writes); other processes' arrive after their commit. After the listening connection was
   * lost and re-established the handler receives '*': notifications may be missing.
   */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  /**
   * Announces, after a commit the caller has seen succeed, what botpay_notify would have announced
   * inside it (channel and payload pairs), the same way: this process's listeners at once, other
   * instances' through NOTIFY. For a statement that leaves its announcements to its caller
   * (spend_run with p_announce false, src/spend/run.ts): on PostgreSQL each botpay_notify inside a
   * statement is a NOTICE, which PostgreSQL sends to the client at once, a socket write and a
   * wake-up of the service apiece.
   */
  announce(notifications: ReadonlyArray<readonly [channel: string, payload: string]>): Promise<void>;
  /**
   * Whether the database answers, for /readyz: without waiting for a session, so that a busy pool
   * is never reported as an unreachable database (PostgreSQL: on the LISTEN connection).
   */
  ping(): Promise<void>;
  /** The instance's sessions with the database: in use, waiting, waits so far (/readyz, /metrics, shedding). */
  load(): DbLoad;
  close(): Promise<void>;
}

const PREPARED = new Map<string, string>();

/**
 * Marks a hot statement that the PostgreSQL driver prepares once per connection (a named
 * statement: later calls send only its parameters, and PostgreSQL neither parses, analyses nor
 * plans it again); returns the SQL unchanged. For statements whose parse and plan showed in a
 * profile: the checkout call (then checkout_attempt) names 22 parameters, and resolving them was about 3 % of
 * PostgreSQL's CPU per checkout. PGlite runs it like any other statement.
 */
export function prepared(sql: string): string {
  if (!PREPARED.has(sql)) PREPARED.set(sql, `botpay_${PREPARED.size + 1}`);
  return sql;
}

/** The statement name of SQL marked with prepared(), if it was. */
export function preparedName(sql: string): string | undefined {
  return PREPARED.get(sql);
}

/** PostgreSQL error code of an error thrown by either driver, if any. */
export function pgErrorCode(error: unknown): string | undefined {
  if (typeof error === 'object' && error !== null && 'code' in error) {
    const code = (error as { code: unknown }).code;
    return typeof code === 'string' ? code : undefined;
  }
  return undefined;
}

export function isRetryableTransactionError(error: unknown): boolean {
  const code = pgErrorCode(error);
  return code === '40001' || code === '40P01';
}

export async function one<T extends Row>(q: Queryable, sql: string, params?: readonly unknown[]): Promise<T> {
  const rows = await q.query<T>(sql, params);
  const row = rows[0];
  if (row === undefined) throw new Error('expected one row, got none');
  return row;
}

export async function maybeOne<T extends Row>(
  q: Queryable,
  sql: string,
  params?: readonly unknown[],
): Promise<T | undefined> {
  const rows = await q.query<T>(sql, params);
  return rows[0];
}

export function isReadOnlyStatement(sql: string): boolean {
  return (
    /^\s*(SELECT|WITH\s+\w+\s+AS\s*\(\s*SELECT)\b/i.test(sql) && !/\b(INSERT|UPDATE|DELETE)\b/i.test(sql)
  );
}
