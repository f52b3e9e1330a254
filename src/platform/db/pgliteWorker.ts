import { parentPort, workerData } from 'node:worker_threads';
import { openPglite } from './pglite.ts';
import type { Queryable, Row } from './port.ts';
import type { ThreadReply, ThreadRequest, WireError } from './pgliteThread.ts';

// The embedded database's own thread (started by pgliteThread.ts): it owns the PGlite instance and
// runs what the service's main thread asks, one message per call, so that PostgreSQL's work (all
// of it synchronous WebAssembly) never holds up the main thread's event loop: HTTP parsing,
// timers, webhook sends and the tunnel relay go on while a query runs.

const port = parentPort;
if (!port) throw new Error('pgliteWorker.ts runs as a worker thread (see pgliteThread.ts)');
const { dataDir } = workerData as { dataDir: string };

/** Rolls a transaction back (thrown inside PGlite's transaction callback); not an error of the caller's. */
const ROLLBACK = Symbol('rollback');

interface OpenTransaction {
  tx: Queryable;
  finish(commit: boolean): void;
  done: Promise<unknown>;
}

function wireError(error: unknown): WireError {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error), fields: {} };
  // PGlite's DatabaseError carries PostgreSQL's fields (code, detail, constraint, …) as own
  // properties: every primitive one crosses over, so callers see the error as before.
  const fields: Record<string, string | number | boolean> = {};
  for (const [key, value] of Object.entries(error)) {
    if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean')
      fields[key] = value;
  }
  return { name: error.name, message: error.message, fields };
}

const db = await openPglite({ dataDir }).catch((error: unknown) => {
  port.postMessage({ fatal: wireError(error) } satisfies ThreadReply);
  return undefined;
});

if (db) {
  const transactions = new Map<number, OpenTransaction>();
  const reply = (id: number, rows?: Row[]) => port.postMessage({ id, rows } satisfies ThreadReply);
  const fail = (id: number, error: unknown) =>
    port.postMessage({ id, error: wireError(error) } satisfies ThreadReply);
  const run = (id: number, work: Promise<Row[] | undefined>) =>
    work.then(
      (rows) => reply(id, rows),
      (error: unknown) => fail(id, error),
    );
  const openTransaction = (id: number) => {
    const t = transactions.get(id);
    if (!t) throw new Error('the transaction is over');
    return t;
  };

  port.on('message', (m: ThreadRequest) => {
    switch (m.op) {
      case 'query':
        void run(m.id, db.query(m.sql, m.params));
        return;
      case 'exec':
        void run(
          m.id,
          db.exec(m.sql).then(() => undefined),
        );
        return;
      case 'begin': {
        // PGlite runs one transaction at a time and holds it for its whole callback: the callback
        // here lasts until the main thread sends `end`, its statements arrive as `txQuery`.
        let entered: () => void = () => {};
        const inside = new Promise<void>((resolve) => {
          entered = resolve;
        });
        let finish: (commit: boolean) => void = () => {};
        const decided = new Promise<boolean>((resolve) => {
          finish = resolve;
        });
        const done = db.transaction(
          async (tx) => {
            transactions.set(m.id, { tx, finish, done });
            entered();
            if (!(await decided)) throw ROLLBACK;
          },
          { retries: 0 },
        );
        // The main thread retries; a failure to begin is its answer to `begin`.
        void run(
          m.id,
          Promise.race([inside, done]).then(() => undefined),
        );
        done.catch(() => {});
        return;
      }
      case 'txQuery':
        try {
          void run(m.id, openTransaction(m.tx).tx.query(m.sql, m.params));
        } catch (error) {
          fail(m.id, error);
        }
        return;
      case 'txExec':
        try {
          void run(
            m.id,
            openTransaction(m.tx)
              .tx.exec(m.sql)
              .then(() => undefined),
          );
        } catch (error) {
          fail(m.id, error);
        }
        return;
      case 'end': {
        const t = transactions.get(m.tx);
        if (!t) {
          reply(m.id);
          return;
        }
        transactions.delete(m.tx);
        t.finish(m.commit);
        // COMMIT's own failure (a deferred constraint) is the answer; a rollback asked for is not one.
        void run(
          m.id,
          t.done.then(
            () => undefined,
            (error: unknown) => {
              if (error === ROLLBACK) return undefined;
              throw error;
            },
          ),
        );
        return;
      }
      case 'listen':
        void run(
          m.id,
          db
            .listen(m.channel, (payload) =>
              port.postMessage({ channel: m.channel, payload } satisfies ThreadReply),
            )
            .then(() => undefined),
        );
        return;
      case 'ping':
        // Answered between statements, without queueing behind them: the thread is alive and the
        // database open.
        if (db.raw.closed) fail(m.id, new Error('the embedded database is closed'));
        else reply(m.id);
        return;
      case 'close':
        void run(
          m.id,
          db.close().then(() => undefined),
        );
        return;
    }
  });
  port.postMessage({ ready: true } satisfies ThreadReply);
}
