import { setFlagsFromString } from 'node:v8';
import { type Extension, PGlite } from '@electric-sql/pglite';
import { WAIT_BUCKETS } from './gate.ts';
import {
  type Db,
  isRetryableTransactionError,
  type Queryable,
  type Row,
  type TransactionOptions,
} from './port.ts';

export interface PgliteOptions {
  /** Directory of the data; undefined keeps the database in memory. */
  dataDir?: string;
  /** A tarball made by `dumpDataDir` (tests start from a migrated template). */
  loadDataDir?: Blob | File;
}

const parsers = { 20: (value: string) => Number(value) };

// PGlite is PostgreSQL compiled to WebAssembly (a 9 MB module). V8 compiles it with its baseline
// compiler (Liftoff) and, by default, recompiles every function that has run a little with its
// optimising one (TurboFan) on background threads. Opening a database (loading the data directory,
// recovery, migrations) runs much code once: that tier-up then costs seconds of CPU on a small
// machine and ~50 MB of code memory for functions that never run again. A larger tiering budget
// leaves to TurboFan the functions that stay hot in the running service. Set before the module is
// compiled (the first openPglite) unless the process was started with its own --wasm-* flags.
// Measured (PGlite.create on an existing directory, RSS a second later): default 3.1 s, 320 MB;
// with this budget 1.0 s, 251 MB; CPU-bound queries reach the same speed after warming up.
const WASM_TIERING_BUDGET = 100_000_000;
let wasmTuned = false;

function tuneWasmTiering(): void {
  if (wasmTuned) return;
  wasmTuned = true;
  if (process.execArgv.some((arg) => arg.startsWith('--wasm-'))) return;
  setFlagsFromString(`--wasm-tiering-budget=${WASM_TIERING_BUDGET}`);
}

// PostgreSQL's buffer cache. PGlite 0.3 starts its PostgreSQL with `-c shared_buffers=128MB`, a
// string compiled into the WebAssembly module (PGlite has no option for it, and PostgreSQL's
// command-line settings win over postgresql.conf and ALTER SYSTEM). PostgreSQL maps its shared
// memory at start and Emscripten zero-fills every mapped byte, so those 128 MB are resident from
// the first second whether or not a page is ever cached: 128 MB of the process's memory and
// ~100 ms of start-up. An embedded installation's database is small (tens of MB), and what does
// not fit is read back through the operating system's page cache, so 32 MB is plenty. Durability
// does not depend on it: every commit still writes and syncs its WAL (fsync, synchronous_commit
// and full_page_writes stay on).
//
// The setting is changed the only way PGlite leaves open: an extension's set-up may add to the
// Emscripten options, and its pre-run hook (after the module's memory is initialised, before
// PostgreSQL's main) rewrites that one argument in place. It applies only when the argument is
// found exactly once; otherwise PostgreSQL keeps PGlite's value (a newer PGlite) — which
// test/foundation/embeddedMemory.test.ts reports by checking `SHOW shared_buffers`.
export const EMBEDDED_SHARED_BUFFERS = '32MB';
const PGLITE_SHARED_BUFFERS_ARG = 'shared_buffers=128MB\0';

/** Rewrites PGlite's compiled-in shared_buffers argument in the module's memory; true if it did. */
export function rewriteSharedBuffers(heap: Uint8Array, value = EMBEDDED_SHARED_BUFFERS): boolean {
  const memory = Buffer.from(heap.buffer, heap.byteOffset, heap.byteLength);
  const at = memory.indexOf(PGLITE_SHARED_BUFFERS_ARG, 0, 'latin1');
  if (at < 0 || memory.indexOf(PGLITE_SHARED_BUFFERS_ARG, at + 1, 'latin1') >= 0) return false;
  const replacement = Buffer.from(`shared_buffers=${value}\0`, 'latin1');
  if (replacement.length > PGLITE_SHARED_BUFFERS_ARG.length) return false;
  replacement.copy(memory, at);
  return true;
}

const sharedBuffers: Extension = {
  name: 'botpay-shared-buffers',
  async setup(_pg, emscriptenOpts: { preRun?: ((mod: { HEAPU8: Uint8Array }) => void)[] }) {
    return {
      emscriptenOpts: {
        ...emscriptenOpts,
        preRun: [
          ...(emscriptenOpts.preRun ?? []),
          (mod: { HEAPU8: Uint8Array }) => rewriteSharedBuffers(mod.HEAPU8),
        ],
      },
    };
  },
};

export async function openPglite(options: PgliteOptions): Promise<Db & { raw: PGlite }> {
  tuneWasmTiering();
  const raw = await PGlite.create({
    extensions: { sharedBuffers },
    ...(options.dataDir ? { dataDir: options.dataDir } : {}),
    ...(options.loadDataDir ? { loadDataDir: options.loadDataDir } : {}),
    parsers,
  });
  let closed = false;
  // In-process (tests, the template build, the embedded thread itself): PGlite's own queue is the
  // only one; calls under way are counted for load(), none is refused.
  let calls = 0;
  const counted = async <R>(work: Promise<R>): Promise<R> => {
    calls++;
    try {
      return await work;
    } finally {
      calls--;
    }
  };
  return {
    kind: 'pglite',
    raw,
    async query<T extends Row>(sql: string, params?: readonly unknown[]) {
      const result = await counted(raw.query<T>(sql, params as unknown[] | undefined));
      return result.rows;
    },
    async exec(sql: string) {
      await raw.exec(sql);
    },
    async write<T extends Row>(sql: string, params?: readonly unknown[]) {
      // A statement on its own is its own transaction here too.
      const result = await counted(raw.query<T>(sql, params as unknown[] | undefined));
      return result.rows;
    },
    async transaction<T>(fn: (tx: Queryable) => Promise<T>, opts?: TransactionOptions): Promise<T> {
      const retries = opts?.retries ?? 5;
      for (let attempt = 0; ; attempt++) {
        try {
          // PGlite runs one transaction at a time: the whole callback holds its lock.
          const value = await counted(
            raw.transaction(async (t) => {
              const tx: Queryable = {
                async query<R extends Row>(sql: string, params?: readonly unknown[]) {
                  const result = await t.query<R>(sql, params as unknown[] | undefined);
                  return result.rows;
                },
                async exec(sql: string) {
                  await t.exec(sql);
                },
              };
              return fn(tx);
            }),
          );
          return value;
        } catch (error) {
          if (attempt < retries && isRetryableTransactionError(error)) continue;
          throw error;
        }
      }
    },
    async announce(notifications) {
      // PGlite hands a notification to its listeners when the statement that sent it commits.
      for (const [channel, payload] of notifications) {
        await counted(raw.query('SELECT pg_notify($1, $2)', [channel, payload]));
      }
    },
    async listen(channel, onNotify) {
      // PGlite hands a notification to its listeners while it reads the result of the committing
      // statement, before that call returns: read-your-writes holds as the port requires.
      const unsubscribe = await raw.listen(channel, onNotify);
      return async () => {
        await unsubscribe();
      };
    },
    async ping() {
      await raw.query('SELECT 1');
    },
    load() {
      return {
        size: 1,
        inUse: Math.min(calls, 1),
        waiting: Math.max(0, calls - 1),
        oldestWaitMs: 0,
        maxWaitMs: Number.POSITIVE_INFINITY,
        waitCounts: new Array<number>(WAIT_BUCKETS.length + 1).fill(0),
        waitSumSeconds: 0,
        refused: 0,
      };
    },
    async close() {
      if (closed) return;
      closed = true;
      await raw.close();
    },
  };
}
