import { isOverloadedError } from './gate.ts';
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Db, Queryable } from './port.ts';

// Numbered, forward-only migrations (src/migrations/NNNN_name.sql), applied at start-up in one
// transaction behind an advisory lock, so two instances starting at once apply each exactly once.
//
// Database functions live in files of their own (src/migrations/functions/<name>.sql, each a
// `CREATE OR REPLACE`): the file is the one definition. After the migrations, in the same
// transaction and behind the same lock, every file whose checksum differs from the one recorded in
// schema_functions is applied and recorded; all of them are applied again whenever a migration ran
// (a migration may have replaced one). A migration must not rely on a function file's newest
// definition: on a fresh database the files run after every migration.
//
// Generic plans: the hot functions (spend_run, webhook_claim, webhook_record_and_claim) carry
// `SET plan_cache_mode = force_generic_plan`. Left to choose, PostgreSQL re-plans their statements
// at every call once the tables have statistics, and planning their joins probes the ends of the
// id indexes for the actual minimum and maximum (get_actual_variable_range); on a table whose
// oldest rows the retention job has just deleted and vacuum has not yet cleaned, that probe walks
// every dead index entry at that end: milliseconds per call on a large table. Their statements
// find rows by key or through partial indexes, so one plan fits every call (bench/retention.ts).
// They also carry `SET jit = off`: a generic plan's cost is estimated without the arguments and
// can pass jit_above_cost, and JIT code is compiled at every execution (measured: 26 ms per claim
// on a 10 M-row table, against 0.15 ms without); these statements touch a handful of rows.
//
// Index plans: spend_run and the ledger's balance check (ledger_check_balanced) also carry
// `SET enable_seqscan = off`. A connection keeps the plans it made, and plans made while the
// statistics described small tables (a young database after its first analyse) read growing tables
// whole — the balance check's sum over ledger_entries, the foreign-key check of each entry on
// ledger_transactions (planned inside the call, so the setting reaches it) — until the next analyse.
// Measured (`BENCH_ANALYZE=1 npm run bench:checkout`, statistics taken at seeding, tables grown
// twenty-fold by the load): PostgreSQL's CPU per checkout 1,367–1,469 µs before, 934 after. Their
// statements look rows up by key, so an index plan is the right one at every size; where no index
// applies PostgreSQL still scans. test/foundation/ledgerPlan.test.ts plays the young database.

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));
export const FUNCTIONS_DIR = fileURLToPath(new URL('../../migrations/functions/', import.meta.url));
const MIGRATION_LOCK = 7_254_001;

/**
 * The tables migrate() keeps for itself: which migrations and function files a database has.
 * Not application data: `botpay export` writes their contents as the file's schema version and
 * `botpay import` lets migrate() fill them on the target (src/ops/transfer.ts).
 */
export const BOOKKEEPING_TABLES: readonly string[] = [
  'schema_migrations',
  'schema_functions',
  'schema_floor',
];

/**
 * The line that marks a migration earlier versions must not run beside (as 0050, which moved every
 * amount from cents to micro-dollars): once it is applied, an instance whose code lacks it refuses
 * to migrate (so it does not start) and answers /readyz 503, instead of serving under a schema it
 * would misread. Recorded in schema_floor; docs/deploy.md, "Migrations".
 */
export const STOPS_EARLIER_VERSIONS = '-- botpay: earlier versions stop';
const stopsEarlier = (m: Migration) =>
  m.sql.split('\n').some((line) => line.trim() === STOPS_EARLIER_VERSIONS);

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export interface FunctionFile {
  name: string;
  sql: string;
  checksum: string;
}

export const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

const fileUrl = (dir: string, file: string) => new URL(file, `file://${dir.endsWith('/') ? dir : `${dir}/`}`);

export async function loadMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f)).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    migrations.push({
      version: Number(file.slice(0, 4)),
      name: file.slice(5, -4),
      sql: await readFile(fileUrl(dir, file), 'utf8'),
    });
  }
  // Numbers are reserved per feature area, so gaps are fine; a number used twice is not.
  for (const [i, migration] of migrations.entries()) {
    const previous = migrations[i - 1];
    if (previous && migration.version <= previous.version)
      throw new Error(`migration number used twice (${files[i]})`);
  }
  return migrations;
}

/** The function files, by name (the file name without `.sql`), sorted. */
export async function loadFunctions(dir = FUNCTIONS_DIR): Promise<FunctionFile[]> {
  const files = (await readdir(dir)).filter((f) => /^[a-z0-9_]+\.sql$/.test(f)).sort();
  const functions: FunctionFile[] = [];
  for (const file of files) {
    const sql = await readFile(fileUrl(dir, file), 'utf8');
    functions.push({ name: file.slice(0, -4), sql, checksum: sha256(sql) });
  }
  return functions;
}

/** Applies pending migrations, then changed function files; returns the migration versions it applied. */
export async function migrate(
  db: Db,
  migrations?: Migration[],
  functions?: FunctionFile[],
): Promise<number[]> {
  const all = migrations ?? (await loadMigrations());
  const fns = functions ?? (await loadFunctions());
  return db.transaction(
    async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await tx.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
      await tx.query('CREATE TABLE IF NOT EXISTS schema_floor (version integer PRIMARY KEY)');
      const done = new Set(
        (await tx.query<{ version: number }>('SELECT version FROM schema_migrations')).map((r) => r.version),
      );
      const floor = unknownFloor(await floorOf(tx), all);
      if (floor !== null) {
        throw new Error(
          `this database was migrated by a newer version, whose migration ${floor} earlier versions must not ` +
            'run beside: run that version or a later one (docs/deploy.md, "Migrations")',
        );
      }
      const applied: number[] = [];
      for (const m of all) {
        if (done.has(m.version)) continue;
        await tx.exec(m.sql);
        await tx.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
        if (stopsEarlier(m)) await tx.query('INSERT INTO schema_floor (version) VALUES ($1)', [m.version]);
        applied.push(m.version);
      }
      // A newer version migrated this database (an instance of the previous version restarting
      // during a rolling deploy): its function files stay. They serve the previous version's calls
      // too (docs/deploy.md, "Migrations"); this version's older files would undo them.
      if (newerThan(done, all)) return applied;
      await applyFunctions(tx, fns, applied.length > 0);
      return applied;
    },
    { retries: 0 },
  );
}

/** The migrations applied here that earlier versions must not run beside (STOPS_EARLIER_VERSIONS). */
async function floorOf(q: Queryable): Promise<number[]> {
  return (await q.query<{ version: number }>('SELECT version FROM schema_floor')).map((r) => r.version);
}

/** The newest of `floor` that `known` lacks, or null: whether this code must not run on the database. */
function unknownFloor(floor: number[], known: Migration[]): number | null {
  const versions = new Set(known.map((m) => m.version));
  const unknown = floor.filter((v) => !versions.has(v));
  return unknown.length > 0 ? Math.max(...unknown) : null;
}

/** Whether the database holds a migration that `known` lacks: a newer version's code migrated it. */
function newerThan(applied: Iterable<number>, known: Migration[]): boolean {
  const versions = new Set(known.map((m) => m.version));
  for (const version of applied) if (!versions.has(version)) return true;
  return false;
}

/** Inside migrate's transaction: (re-)creates the function files that changed, or all of them. */
async function applyFunctions(tx: Queryable, fns: FunctionFile[], all: boolean): Promise<void> {
  await tx.query(`CREATE TABLE IF NOT EXISTS schema_functions (
    name text PRIMARY KEY,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
  )`);
  const recorded = new Map(
    (await tx.query<{ name: string; checksum: string }>('SELECT name, checksum FROM schema_functions')).map(
      (r) => [r.name, r.checksum],
    ),
  );
  for (const f of fns) {
    if (!all && recorded.get(f.name) === f.checksum) continue;
    await tx.exec(f.sql);
    await tx.query(
      `INSERT INTO schema_functions (name, checksum) VALUES ($1, $2)
       ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()`,
      [f.name, f.checksum],
    );
  }
}

/** For /readyz and `doctor`: true when every known migration and function file is applied. */
export async function migrationsApplied(
  db: Db,
  migrations?: Migration[],
  functions?: FunctionFile[],
): Promise<boolean> {
  const all = migrations ?? (await loadMigrations());
  const fns = functions ?? (await loadFunctions());
  try {
    const rows = await db.query<{ version: number }>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((r) => r.version));
    if (!all.every((m) => applied.has(m.version))) return false;
    if (newerThan(applied, all)) {
      // A newer version's schema: its function files are the ones in place, by design (migrate),
      // unless one of its migrations stops earlier versions. A schema without the floor table was
      // migrated before it existed (older code): nothing there stops this version.
      const floor = await floorOf(db).catch((error) => {
        if (isOverloadedError(error)) throw error;
        return [];
      });
      return unknownFloor(floor, all) === null;
    }
    if (fns.length === 0) return true;
    const recorded = new Map(
      (await db.query<{ name: string; checksum: string }>('SELECT name, checksum FROM schema_functions')).map(
        (r) => [r.name, r.checksum],
      ),
    );
    return fns.every((f) => recorded.get(f.name) === f.checksum);
  } catch (error) {
    // A busy instance is not a schema behind its code: the caller keeps what it knew.
    if (isOverloadedError(error)) throw error;
    return false;
  }
}
