import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { SessionGate } from './gate.ts';
import {
  type Db,
  isRetryableTransactionError,
  type Queryable,
  type Row,
  type TransactionOptions,
} from './port.ts';

// The embedded database as the service runs it: PGlite on a worker thread of its own
// (pgliteWorker.ts), behind the same port as PostgreSQL. PGlite is PostgreSQL compiled to
// WebAssembly and every statement runs synchronously on the thread that owns it: on the main
// thread each query held up HTTP parsing, timers, webhook sends and the tunnel relay (32 clients:
// /healthz p99 seconds, the logged response time a fraction of what clients saw; issue 32). Here
// the main thread only posts a message per call and receives the rows.
//
// The port's contract holds across the thread boundary:
// - a transaction is one PGlite transaction on the worker, held from `begin` to `end` while the
//   callback runs here; its statements go as `txQuery`. Retries happen here, as in-process.
// - read-your-writes: PGlite hands a commit's notifications to the worker's listener while it
//   reads the commit's result, and the worker posts them before the result on the same port, so
//   this thread's listeners have them before the committing call returns.
// - errors keep PostgreSQL's fields (code, detail, constraint, …).
// Calls take a session of the gate (gate.ts) first: at most `sessions` are handed to the worker at
// once (enough to keep it busy), the rest wait in line here, bounded, and are refused with
// OverloadedError when the embedded database cannot take them in time.

export type ThreadRequest =
  | { id: number; op: 'query'; sql: string; params?: unknown[] }
  | { id: number; op: 'exec'; sql: string }
  | { id: number; op: 'begin' }
  | { id: number; op: 'txQuery'; tx: number; sql: string; params?: unknown[] }
  | { id: number; op: 'txExec'; tx: number; sql: string }
  | { id: number; op: 'end'; tx: number; commit: boolean }
  | { id: number; op: 'listen'; channel: string }
  | { id: number; op: 'ping' }
  | { id: number; op: 'close' };

export interface WireError {
  name: string;
  message: string;
  fields: Record<string, string | number | boolean>;
}

export type ThreadReply =
  | { id: number; rows?: Row[]; error?: undefined }
  | { id: number; error: WireError; rows?: undefined }
  | { channel: string; payload: string }
  | { ready: true }
  | { fatal: WireError };

/** A request without its id (distributed over the union's members). */
type Call = ThreadRequest extends infer R ? (R extends ThreadRequest ? Omit<R, 'id'> : never) : never;

export interface PgliteThreadOptions {
  dataDir: string;
  /** Calls handed to the worker at once (its queue; PGlite runs one statement at a time). */
  sessions?: number;
  /** How long a call may wait for a session before OverloadedError. */
  maxWaitMs?: number;
}

/** Calls in the worker's queue at once: enough that it never waits for the next message. */
export const EMBEDDED_SESSIONS = 4;
const PING_TIMEOUT_MS = 2_000;

function fromWire(wire: WireError): Error {
  const error = new Error(wire.message);
  error.name = wire.name;
  return Object.assign(error, wire.fields);
}

/** Where the worker's code is: beside the compiled bundle, else the TypeScript source through tsx. */
function workerEntry(): { url: URL; workerData: Record<string, unknown> } {
  // In the bundle (bin/compiled.mjs) `import.meta.dirname` is the bundle's directory, where the
  // worker is an entry point of its own; `import.meta.url` of a source always names the source.
  const dir = import.meta.dirname;
  const compiled = dir ? join(dir, 'pglite-worker.js') : undefined;
  if (compiled && existsSync(compiled)) return { url: pathToFileURL(compiled), workerData: {} };
  return {
    url: new URL('./tsWorker.mjs', import.meta.url),
    workerData: { entry: new URL('./pgliteWorker.ts', import.meta.url).href },
  };
}

export async function openPgliteThread(options: PgliteThreadOptions): Promise<Db> {
  const entry = workerEntry();
  const worker = new Worker(entry.url, { workerData: { ...entry.workerData, dataDir: options.dataDir } });
  const gate = new SessionGate(options.sessions ?? EMBEDDED_SESSIONS, options.maxWaitMs ?? 5_000);
  const pending = new Map<number, { resolve(rows: Row[] | undefined): void; reject(error: Error): void }>();
  const listeners = new Map<string, Set<(payload: string) => void>>();
  let nextId = 1;
  let stopped: Error | undefined;
  let closed = false;

  const ready = new Promise<void>((resolve, reject) => {
    const onMessage = (m: ThreadReply) => {
      if ('ready' in m) resolve();
      else if ('fatal' in m) reject(fromWire(m.fatal));
      else return;
      worker.off('message', onMessage);
    };
    worker.on('message', onMessage);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`the embedded database's thread exited (${code})`)));
  });

  worker.on('message', (m: ThreadReply) => {
    if ('channel' in m) {
      for (const fn of listeners.get(m.channel) ?? []) {
        // The commit is done: a failing listener must not make it look failed.
        try {
          fn(m.payload);
        } catch {}
      }
      return;
    }
    if (!('id' in m)) return;
    const call = pending.get(m.id);
    if (!call) return;
    pending.delete(m.id);
    // The thread keeps the process alive only while a call waits for its answer: an open but idle
    // database does not keep a command that has finished from exiting.
    if (pending.size === 0) worker.unref();
    if (m.error) call.reject(fromWire(m.error));
    else call.resolve(m.rows);
  });
  const stop = (error: Error) => {
    // PostgreSQL's class 57P (operator intervention): the app answers 503 service_unavailable.
    stopped ??= Object.assign(new Error(`the embedded database's thread stopped: ${error.message}`), {
      code: '57P01',
    });
    for (const call of pending.values()) call.reject(stopped);
    pending.clear();
  };
  worker.on('error', stop);
  worker.on('exit', (code) => stop(new Error(closed ? 'closed' : `exit code ${code}`)));

  try {
    await ready;
  } catch (error) {
    await worker.terminate();
    throw error;
  }
  worker.unref();

  function send(request: Call, id = nextId++): Promise<Row[] | undefined> {
    if (stopped) return Promise.reject(stopped);
    return new Promise((resolve, reject) => {
      if (pending.size === 0) worker.ref();
      pending.set(id, { resolve, reject });
      worker.postMessage({ ...request, id });
    });
  }

  async function session<T>(work: () => Promise<T>): Promise<T> {
    if (!gate.tryAcquire()) await gate.acquire();
    try {
      return await work();
    } finally {
      gate.release();
    }
  }

  async function rows<T extends Row>(sql: string, params?: readonly unknown[]): Promise<T[]> {
    const result = await session(() => send({ op: 'query', sql, params: params as unknown[] | undefined }));
    return (result ?? []) as T[];
  }

  async function attempt<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    // The transaction is known by the id of its `begin`.
    const tx = nextId++;
    await send({ op: 'begin' }, tx);
    const handle: Queryable = {
      async query<R extends Row>(sql: string, params?: readonly unknown[]) {
        const result = await send({ op: 'txQuery', tx, sql, params: params as unknown[] | undefined });
        return (result ?? []) as R[];
      },
      async exec(sql: string) {
        await send({ op: 'txExec', tx, sql });
      },
    };
    let value: T;
    try {
      value = await fn(handle);
    } catch (error) {
      await send({ op: 'end', tx, commit: false }).catch(() => {});
      throw error;
    }
    await send({ op: 'end', tx, commit: true });
    return value;
  }

  return {
    kind: 'pglite',
    query: rows,
    write: rows,
    async exec(sql: string) {
      await session(() => send({ op: 'exec', sql }));
    },
    async transaction<T>(fn: (tx: Queryable) => Promise<T>, opts?: TransactionOptions): Promise<T> {
      const retries = opts?.retries ?? 5;
      for (let n = 0; ; n++) {
        try {
          return await session(() => attempt(fn));
        } catch (error) {
          if (n < retries && isRetryableTransactionError(error)) continue;
          throw error;
        }
      }
    },
    async announce(notifications) {
      // The database thread hands a notification to the listeners when its statement commits.
      for (const [channel, payload] of notifications)
        await rows('SELECT pg_notify($1, $2)', [channel, payload]);
    },
    async listen(channel, onNotify) {
      let set = listeners.get(channel);
      const isNew = !set;
      if (!set) {
        set = new Set();
        listeners.set(channel, set);
      }
      set.add(onNotify);
      if (isNew) await send({ op: 'listen', channel });
      return async () => {
        set.delete(onNotify);
      };
    },
    async ping() {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        send({ op: 'ping' }),
        new Promise((_, reject) => {
          timer = setTimeout(
            () =>
              reject(
                Object.assign(
                  new Error(`the embedded database did not answer within ${PING_TIMEOUT_MS} ms`),
                  {
                    code: '57P01',
                  },
                ),
              ),
            PING_TIMEOUT_MS,
          );
        }),
      ]).finally(() => clearTimeout(timer));
    },
    load() {
      return gate.load();
    },
    async close() {
      if (closed) return;
      closed = true;
      try {
        if (!stopped) await send({ op: 'close' });
      } finally {
        await worker.terminate();
      }
    },
  };
}
