import pg from 'pg';
import {
  commitListeners,
  type Db,
  isReadOnlyStatement,
  isRetryableTransactionError,
  type Queryable,
  type Row,
  type TransactionOptions,
} from './port.ts';

// int8 (bigint) columns hold cents: parse them as numbers. Cents stay far below 2^53.
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === 20) return (value: string) => Number(value);
    return pg.types.getTypeParser(oid, format);
  },
};

const DEFERRED_PREFIX = 'botpay-notify ';

function isConnectionError(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return typeof code === 'string' ? /^(08|57P)/.test(code) || code === 'ECONNRESET' : true;
}

export interface PostgresOptions {
  connectionString: string;
  /** Schema to use (tests isolate themselves in a schema of their own). */
  schema?: string;
  max?: number;
}

export async function openPostgres(options: PostgresOptions): Promise<Db> {
  const searchPath = options.schema ? `-c search_path=${options.schema}` : undefined;
  const config: pg.PoolConfig = {
    connectionString: options.connectionString,
    max: options.max ?? 20,
    types,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    ...(searchPath ? { options: searchPath } : {}),
  };
  const pool = new pg.Pool(config);
  // An idle client that loses its connection (PostgreSQL restarted) must not crash the process.
  pool.on('error', () => {});

  const listeners = new Map<string, Set<(payload: string) => void>>();
  let listenClient: pg.Client | undefined;
  let listenConnecting: Promise<pg.Client> | undefined;
  let closed = false;
  let everConnected = false;

  async function connectListener(): Promise<pg.Client> {
    const client = new pg.Client({ ...config });
    client.on('notification', (msg) => {
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

  const commits = commitListeners();

  // Every pooled session asks botpay_notify() (migration 0001) to announce notifications as
  // NOTICEs instead of sending them inside the transaction; see sendDeferred.
  pool.on('connect', (client) => {
    client.query('SET botpay.defer_notify = on').catch(() => {});
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

  // Sent after COMMIT, outside any write transaction: PostgreSQL serialises the commits of
  // transactions that NOTIFY, so notifying from inside would cap write throughput. Payloads of
  // one channel are joined with commas (listeners split them). Best effort: a lost notification
  // only delays a wake-up until the next poll, or a cache entry until its TTL.
  function sendDeferred(pending: Map<string, Set<string>>): void {
    for (const [channel, payloads] of pending) {
      let batch = '';
      const flush = () => {
        if (batch) pool.query('SELECT pg_notify($1, $2)', [channel, batch]).catch(() => {});
        batch = '';
      };
      for (const payload of payloads) {
        if (batch.length + payload.length + 1 > 7000) flush();
        batch = batch ? `${batch},${payload}` : payload;
      }
      flush();
    }
  }

  /** A statement outside a transaction that may write: run on its own client to catch notices. */
  async function autocommit<T extends Row>(sql: string, params?: readonly unknown[]): Promise<T[]> {
    const client = await pool.connect();
    const notices = collect(client);
    let broken = false;
    try {
      const result = await client.query(sql, params as unknown[] | undefined);
      commits.fire();
      sendDeferred(notices.stop());
      return result.rows as T[];
    } catch (error) {
      notices.stop();
      broken = isConnectionError(error);
      throw error;
    } finally {
      client.release(broken);
    }
  }

  const db: Db = {
    kind: 'postgres',
    async query<T extends Row>(sql: string, params?: readonly unknown[]) {
      if (!isReadOnlyStatement(sql)) return autocommit<T>(sql, params);
      const result = await pool.query(sql, params as unknown[] | undefined);
      return result.rows as T[];
    },
    async exec(sql: string) {
      await autocommit(sql);
    },
    onCommit: commits.add,
    async transaction<T>(fn: (tx: Queryable) => Promise<T>, opts?: TransactionOptions): Promise<T> {
      const retries = opts?.retries ?? 5;
      for (let attempt = 0; ; attempt++) {
        const client = await pool.connect();
        const tx: Queryable = {
          async query<R extends Row>(sql: string, params?: readonly unknown[]) {
            const result = await client.query(sql, params as unknown[] | undefined);
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
          commits.fire();
          sendDeferred(notices.stop());
          return value;
        } catch (error) {
          notices.stop();
          try {
            await client.query('ROLLBACK');
          } catch {
            broken = true;
          }
          if (attempt < retries && isRetryableTransactionError(error)) {
            await new Promise((r) => setTimeout(r, 5 + Math.random() * 20 * (attempt + 1)));
            continue;
          }
          throw error;
        } finally {
          client.release(broken);
        }
      }
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
      await pool.query('SELECT 1');
    },
    async close() {
      closed = true;
      const client = listenClient;
      listenClient = undefined;
      if (client) await client.end().catch(() => {});
      await pool.end();
    },
  };
  return db;
}
