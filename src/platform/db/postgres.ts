import pg from 'pg';
import { SessionGate } from './gate.ts';
import {
  type Db,
  isReadOnlyStatement,
  isRetryableTransactionError,
  preparedName,
  type Queryable,
  type Row,
  type TransactionOptions,
} from './port.ts';

// int8 (bigint) columns hold micro-dollars: parse them as numbers. They stay far below 2^53 ($9 billion).
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === 20) return (value: string) => Number(value);
    return pg.types.getTypeParser(oid, format);
  },
};

const DEFERRED_PREFIX = 'botpay-notify ';

const NEEDS_ESCAPE = /["\\]/;

/**
 * A flat array of strings, numbers, booleans and nulls as the array literal pg would send for it
 * (every element quoted, `\` and `"` escaped, NULL for null), built in one pass; undefined for any
 * other array (nested, dates, buffers, objects), which pg converts itself. pg's own conversion
 * runs two regular-expression replaces per element: the webhook worker's recording call sends
 * eight arrays with an element per delivery, and their conversion showed in its profile
 * (escapeElement, arrayString, prepareValue: 4 % of the worker process's CPU in the backlog).
 */
export function arrayLiteral(values: readonly unknown[]): string | undefined {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (i > 0) out += ',';
    if (v === null || v === undefined) out += 'NULL';
    else if (typeof v === 'string')
      out += NEEDS_ESCAPE.test(v) ? `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"` : `"${v}"`;
    else if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') out += `"${v}"`;
    else return undefined;
  }
  return `${out}}`;
}

/** The parameters with their flat arrays already written as literals (arrayLiteral); the same list when none is an array. */
function withArrayLiterals(params: readonly unknown[] | undefined): unknown[] | undefined {
  if (!params) return undefined;
  let out: unknown[] | undefined;
  for (let i = 0; i < params.length; i++) {
    const v = params[i];
    if (!Array.isArray(v)) continue;
    const literal = arrayLiteral(v);
    if (literal === undefined) continue;
    out ??= params.slice();
    out[i] = literal;
  }
  return out ?? (params as unknown[]);
}

function isConnectionError(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return typeof code === 'string' ? /^(08|57P)/.test(code) || code === 'ECONNRESET' : true;
}

export interface PostgresOptions {
  connectionString: string;
  /** Schema to use (tests isolate themselves in a schema of their own). */
  schema?: string;
  max?: number;
  /**
   * How long a statement may wait for one of the `max` connections before it is refused with
   * OverloadedError (gate.ts). Default 5 s, the time pg-pool's queue used to wait; the service
   * passes DATABASE_POOL_WAIT_MS.
   */
  poolWaitMs?: number;
}

/** How long /readyz waits for the database to answer `SELECT 1` on the LISTEN connection. */
const PING_TIMEOUT_MS = 2_000;

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(Object.assign(new Error(`${what}: no answer within ${ms} ms`), { code: '08006' })),
      ms,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Adds server settings to the connection string's `options` parameter (values in the URL win
 * over the pool config's `options`, so both must go in one place).
 */
export function withServerOptions(connectionString: string, settings: string[]): string {
  const url = new URL(connectionString);
  const current = url.searchParams.get('options') ?? '';
  url.searchParams.set('options', [current, ...settings.map((s) => `-c ${s}`)].filter(Boolean).join(' '));
  return url.toString();
}

/** Retries of Db.write, as many as a transaction's default. */
const WRITE_RETRIES = 5;

/** The wait before retrying after a deadlock or serialization failure: short, jittered, growing. */
function backoff(attempt: number): Promise<void> {
  return new Promise((r) => setTimeout(r, 5 + Math.random() * 20 * (attempt + 1)));
}

export async function openPostgres(options: PostgresOptions): Promise<Db> {
  // Every session asks botpay_notify() (migration 0001) to announce notifications as NOTICEs
  // instead of sending them inside the transaction; see sendDeferred.
  const settings = ['botpay.defer_notify=on', ...(options.schema ? [`search_path=${options.schema}`] : [])];
  const size = options.max ?? 20;
  const config: pg.PoolConfig = {
    connectionString: withServerOptions(options.connectionString, settings),
    max: size,
    types,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
  };
  const pool = new pg.Pool(config);
  // An idle client that loses its connection (PostgreSQL restarted) must not crash the process.
  pool.on('error', () => {});
  // The pool's queue: pool.connect() is called only with a session in hand, so pg-pool never makes
  // it wait for a busy connection, and its connectionTimeoutMillis means "PostgreSQL did not answer".
  const gate = new SessionGate(size, options.poolWaitMs ?? 5_000);

  /** A connection of the pool, once a session is free (unbounded: waits however long it takes). */
  async function connect(unbounded = false): Promise<pg.PoolClient> {
    if (!gate.tryAcquire()) await gate.acquire(unbounded);
    try {
      return await pool.connect();
    } catch (error) {
      gate.release();
      throw error;
    }
  }

  function release(client: pg.PoolClient, broken: boolean): void {
    client.release(broken);
    gate.release();
  }

  /** One statement on a connection of its own, given back afterwards (closed if it broke). */
  async function onConnection<T extends Row>(
    sql: string,
    params: readonly unknown[] | undefined,
    unbounded = false,
  ): Promise<T[]> {
    const client = await connect(unbounded);
    let broken = false;
    try {
      const result = await client.query(sql, withArrayLiterals(params));
      return result.rows as T[];
    } catch (error) {
      broken = isConnectionError(error);
      throw error;
    } finally {
      release(client, broken);
    }
  }

  const listeners = new Map<string, Set<(payload: string) => void>>();
  let listenClient: pg.Client | undefined;
  let listenConnecting: Promise<pg.Client> | undefined;
  let closed = false;
  let everConnected = false;

  async function connectListener(): Promise<pg.Client> {
    const client = new pg.Client({ ...config });
    client.on('notification', (msg) => {
      // Sent by this process's own pool: already handed to the listeners at commit (deliverLocally).
      if (ownBackends.has(msg.processId)) return;
      for (const fn of listeners.get(msg.channel) ?? []) fn(msg.payload ?? '');
    });
    client.on('error', () => {
      listenClient = undefined;
      if (!closed) setTimeout(() => void ensureListener().catch(() => {}), 1_000).unref();
    });
    await client.connect();
    for (const channel of listeners.keys()) await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    const reconnected = everConnected;
    everConnected = true;
    listenClient = client;
    if (reconnected) for (const set of listeners.values()) for (const fn of set) fn('*');
    return client;
  }

  function ensureListener(): Promise<pg.Client> {
    if (listenClient) return Promise.resolve(listenClient);
    listenConnecting ??= connectListener().finally(() => {
      listenConnecting = undefined;
    });
    return listenConnecting;
  }

  // Backend process ids of this pool's connections: their notifications reach this process's
  // listeners directly (deliverLocally), so the copy LISTEN brings back is skipped.
  const ownBackends = new Set<number>();

  pool.on('connect', (client) => {
    // pg-pool listens for errors only on idle clients: a checked-out client whose connection is
    // terminated between two statements (PostgreSQL restarted) would emit an unhandled 'error' and
    // crash the process. The next query on it fails instead, and the client is released as broken.
    client.on('error', () => {});
    const pid = (client as unknown as { processID?: number }).processID;
    if (typeof pid === 'number') {
      ownBackends.add(pid);
      client.once('end', () => ownBackends.delete(pid));
    }
  });

  /** Collects the notifications a statement or transaction announced on this client. */
  function collect(client: pg.PoolClient): { stop(): Map<string, Set<string>> } {
    const pending = new Map<string, Set<string>>();
    const onNotice = (notice: { message?: string }) => {
      const text = notice.message ?? '';
      if (!text.startsWith(DEFERRED_PREFIX)) return;
      const sep = text.indexOf('|', DEFERRED_PREFIX.length);
      if (sep < 0) return;
      const channel = text.slice(DEFERRED_PREFIX.length, sep);
      let set = pending.get(channel);
      if (!set) {
        set = new Set();
        pending.set(channel, set);
      }
      set.add(text.slice(sep + 1));
    };
    client.on('notice', onNotice);
    return {
      stop() {
        client.off('notice', onNotice);
        return pending;
      },
    };
  }

  // This process's listeners learn of its own commits before the caller sees the result (a cache
  // reads its own writes), without waiting for the round trip through LISTEN.
  function deliverLocally(pending: Map<string, Set<string>>): void {
    for (const [channel, payloads] of pending) {
      const fns = listeners.get(channel);
      if (!fns || fns.size === 0) continue;
      const joined = [...payloads].join(',');
      for (const fn of fns) {
        // The transaction is committed: a failing listener must not make it look failed (or retried).
        try {
          fn(joined);
        } catch {}
      }
    }
  }

  // Sent after COMMIT, outside any write transaction: PostgreSQL serialises the commits of
  // transactions that NOTIFY, so notifying from inside would cap write throughput. Payloads of
  // one channel are joined with commas (listeners split them). Notifications are coalesced across
  // commits: one statement is in flight at a time, and what commits announce meanwhile waits for
  // it and goes in the next, merged (a busy instance sends one notifying statement per round trip
  // instead of one per commit; an idle one sends at once). Best effort: a lost notification only
  // delays a wake-up until the next poll, or a cache entry until its TTL.
  let queued = new Map<string, Set<string>>();
  let sending: Promise<void> | undefined;

  function sendDeferred(pending: Map<string, Set<string>>): void {
    for (const [channel, payloads] of pending) {
      let set = queued.get(channel);
      if (!set) {
        set = new Set();
        queued.set(channel, set);
      }
      for (const payload of payloads) set.add(payload);
    }
    if (queued.size > 0 && !sending) {
      sending = drainNotifications().finally(() => {
        sending = undefined;
      });
    }
  }

  async function drainNotifications(): Promise<void> {
    while (queued.size > 0) {
      const batch = queued;
      queued = new Map();
      const channels: string[] = [];
      const batches: string[] = [];
      for (const [channel, payloads] of batch) {
        let joined = '';
        for (const payload of payloads) {
          // A notification's payload must stay under 8,000 bytes.
          if (joined && joined.length + payload.length + 1 > 7000) {
            channels.push(channel);
            batches.push(joined);
            joined = '';
          }
          joined = joined ? `${joined},${payload}` : payload;
        }
        if (joined) {
          channels.push(channel);
          batches.push(joined);
        }
      }
      // Waits for a session however busy the pool is: announcing committed work is not shed.
      await onConnection(
        'SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)',
        [channels, batches],
        true,
      ).catch(() => {});
    }
  }

  /** A statement outside a transaction that may write: run on its own client to catch notices. */
  async function autocommit<T extends Row>(sql: string, params?: readonly unknown[]): Promise<T[]> {
    const client = await connect();
    const notices = collect(client);
    let broken = false;
    try {
      const name = preparedName(sql);
      const values = withArrayLiterals(params);
      const result = name ? await client.query({ name, text: sql, values }) : await client.query(sql, values);
      const pending = notices.stop();
      deliverLocally(pending);
      sendDeferred(pending);
      return result.rows as T[];
    } catch (error) {
      notices.stop();
      broken = isConnectionError(error);
      throw error;
    } finally {
      release(client, broken);
    }
  }

  const db: Db = {
    kind: 'postgres',
    async query<T extends Row>(sql: string, params?: readonly unknown[]) {
      if (!isReadOnlyStatement(sql)) return autocommit<T>(sql, params);
      return onConnection<T>(sql, params);
    },
    async exec(sql: string) {
      await autocommit(sql);
    },
    async write<T extends Row>(sql: string, params?: readonly unknown[]) {
      // Retried like a transaction: a statement on its own that failed on a deadlock or a
      // serialization failure left nothing behind.
      for (let attempt = 0; ; attempt++) {
        try {
          return await autocommit<T>(sql, params);
        } catch (error) {
          if (attempt < WRITE_RETRIES && isRetryableTransactionError(error)) {
            await backoff(attempt);
            continue;
          }
          throw error;
        }
      }
    },
    async transaction<T>(fn: (tx: Queryable) => Promise<T>, opts?: TransactionOptions): Promise<T> {
      const retries = opts?.retries ?? 5;
      for (let attempt = 0; ; attempt++) {
        const client = await connect();
        const tx: Queryable = {
          async query<R extends Row>(sql: string, params?: readonly unknown[]) {
            const name = preparedName(sql);
            const values = withArrayLiterals(params);
            const result = name
              ? await client.query({ name, text: sql, values })
              : await client.query(sql, values);
            return result.rows as R[];
          },
          async exec(sql: string) {
            await client.query(sql);
          },
        };
        const notices = collect(client);
        let broken = false;
        try {
          await client.query('BEGIN');
          const value = await fn(tx);
          await client.query('COMMIT');
          const pending = notices.stop();
          deliverLocally(pending);
          sendDeferred(pending);
          return value;
        } catch (error) {
          notices.stop();
          try {
            await client.query('ROLLBACK');
          } catch {
            broken = true;
          }
          if (attempt < retries && isRetryableTransactionError(error)) {
            await backoff(attempt);
            continue;
          }
          throw error;
        } finally {
          release(client, broken);
        }
      }
    },
    async announce(notifications) {
      const pending = new Map<string, Set<string>>();
      for (const [channel, payload] of notifications) {
        let set = pending.get(channel);
        if (!set) {
          set = new Set();
          pending.set(channel, set);
        }
        set.add(payload);
      }
      deliverLocally(pending);
      sendDeferred(pending);
    },
    async listen(channel, onNotify) {
      let set = listeners.get(channel);
      const isNew = !set;
      if (!set) {
        set = new Set();
        listeners.set(channel, set);
      }
      set.add(onNotify);
      if (isNew) {
        const client = await ensureListener();
        if (listenClient === client) await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
      } else {
        await ensureListener();
      }
      return async () => {
        set.delete(onNotify);
      };
    },
    async ping() {
      // Not through the pool: a pool whose connections are all busy is not a database that is down.
      const client = await withTimeout(ensureListener(), PING_TIMEOUT_MS, 'connecting to PostgreSQL');
      await withTimeout(client.query('SELECT 1'), PING_TIMEOUT_MS, 'SELECT 1');
    },
    load() {
      return gate.load();
    },
    async close() {
      closed = true;
      // What committed work announced goes out before the pool closes.
      await sending;
      const client = listenClient;
      listenClient = undefined;
      if (client) await client.end().catch(() => {});
      await pool.end();
    },
  };
  return db;
}
