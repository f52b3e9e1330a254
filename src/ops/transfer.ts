import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createReadStream, createWriteStream } from 'node:fs';
import { access, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { StringDecoder } from 'node:string_decoder';
import { parseArgs } from 'node:util';
import { createGunzip, createGzip } from 'node:zlib';
import { parseConfig } from '../config.ts';
import { createSecretBox } from '../platform/crypto.ts';
import { BOOKKEEPING_TABLES, loadFunctions, loadMigrations, migrate } from '../platform/db/migrate.ts';
import { openDatabase, sampleStoredSecrets } from '../platform/db/open.ts';
import { type Db, pgErrorCode, type Queryable } from '../platform/db/port.ts';
import { isDataDir } from '../platform/db/template.ts';
import { walletLedgerDrift } from './doctor.ts';

// `botpay export` and `botpay import`: moving a deployment's data to another database, made for
// leaving the embedded database (DATA_DIR) for PostgreSQL (docs/deploy.md, "Moving from the
// embedded database to PostgreSQL").
//
// Nothing here names an application table or column. Tables, columns, foreign keys, sequences and
// triggers are read from the catalog of the schema the service uses, so a migration that adds,
// renames or drops any of them needs no change here; the bookkeeping tables of migrate.ts are the
// schema version, not data. The one exception is the ledger check before commit, which is the
// doctor's (walletLedgerDrift).
//
// The file: gzip of JSON lines, in this order —
//   {"format":"botpay-export","format_version":1,"exported_at":…,"botpay":…,"database":…,
//    "schema":{"migrations":[[1,"foundation"],…],"functions":[["botpay_notify","<sha256>"],…]}}
//   then per table, parents before the tables whose foreign keys name them:
//   {"table":"bots","columns":["id","name",…]}
//   ["bot_…","…",null,…]                one line per row: each column's text form, or null
//   {"sequences":[["events_seq_seq","41",true],…]}       last_value and is_called of each
//   {"end":{"rows":{"bots":3,…},"sha256":"<of every byte before this line>"}}
// Values are PostgreSQL's own text forms (ISO dates in UTC, hex bytea, shortest exact floats),
// read back by each column's type: exact for every type, whatever the JavaScript drivers make of
// numbers. A file without its end line, with a line out of place or with bytes changed is refused
// before anything is written.
//
// Export reads in one REPEATABLE READ, READ ONLY transaction (one snapshot: a ledger entry and
// the wallet it moved are both in the file or neither), table by table through a cursor.
//
// Import loads into an empty database at the file's schema version, in one transaction: every row
// goes first into a temporary table per table (its JSON line), then each table is filled with one
// INSERT … SELECT, in foreign-key order — PostgreSQL checks the foreign keys at the end of each
// statement, so rows that name other rows of their own table load in any order. The tables'
// triggers are disabled for the load (ALTER TABLE … DISABLE TRIGGER, per trigger, restored to its
// state before commit): the rows are copied as they were, and a trigger must not apply again what
// the source already applied — the ledger's apply trigger would add every entry to wallet
// balances the file already holds, and the event trigger would make a second webhook delivery for
// every event. Foreign keys are not triggers of the user and stay checked. This needs the owner of
// the tables, the user that migrates them; `SET session_replication_role = replica` would need a
// superuser and turn the foreign-key checks off as well. The ALTER TABLEs are part of the
// transaction: no other session ever sees the tables without their triggers, and a failed import
// leaves them as they were. Before commit: every table holds as many rows as the file says, the
// wallets equal their ledger entries (the doctor's check) and SECRET_KEY decrypts the stored
// secrets.

export const EXPORT_FORMAT = 'botpay-export';
export const EXPORT_FORMAT_VERSION = 1;

/** A refusal or failure said in one line; `exitCode` 2 for what the operator must change. */
export class TransferError extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
    this.name = 'TransferError';
  }
}

export interface SchemaVersion {
  /** [version, name] of every applied migration, by version. */
  migrations: Array<[number, string]>;
  /** [name, sha256] of every applied function file, by name. */
  functions: Array<[string, string]>;
}

interface Header {
  format: string;
  format_version: number;
  exported_at: string;
  botpay?: string;
  database: string;
  schema: SchemaVersion;
}

interface FileTable {
  table: string;
  columns: string[];
  rows: number;
}

type SequenceValue = [name: string, lastValue: string, isCalled: boolean];

export interface ExportContents {
  header: Header;
  tables: FileTable[];
  sequences: SequenceValue[];
}

// ---------------------------------------------------------------------------------------------
// The catalog

interface CatalogTable {
  name: string;
  columns: Array<{ name: string; type: string }>;
}

/** An identifier quoted for SQL. */
export const ident = (name: string) => `"${name.replaceAll('"', '""')}"`;

/**
 * The tables of the current schema with their columns (generated ones left out: PostgreSQL
 * computes them), parents before the tables whose foreign keys name them; migrate.ts's own tables
 * and partitions (their parent holds their rows) are not listed.
 */
export async function catalogTables(q: Queryable): Promise<CatalogTable[]> {
  const columns = await q.query<{ table_name: string; column_name: string; type: string }>(
    `SELECT c.relname AS table_name, a.attname AS column_name, format_type(a.atttypid, a.atttypmod) AS type
       FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace
       JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
      WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
        AND c.relname <> ALL ($1::text[])
      ORDER BY c.relname, a.attnum`,
    [BOOKKEEPING_TABLES],
  );
  const references = await q.query<{ table_name: string; parent: string }>(
    `SELECT DISTINCT c.relname AS table_name, p.relname AS parent
       FROM pg_constraint k
       JOIN pg_class c ON c.oid = k.conrelid
       JOIN pg_class p ON p.oid = k.confrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE k.contype = 'f' AND n.nspname = current_schema() AND p.relnamespace = c.relnamespace`,
  );
  const byName = new Map<string, CatalogTable>();
  for (const row of columns) {
    let table = byName.get(row.table_name);
    if (!table) {
      table = { name: row.table_name, columns: [] };
      byName.set(row.table_name, table);
    }
    table.columns.push({ name: row.column_name, type: row.type });
  }
  // Kahn's algorithm, by name among the tables that are ready: the same order every time.
  const parents = new Map<string, Set<string>>([...byName.keys()].map((name) => [name, new Set()]));
  for (const r of references) {
    if (r.table_name !== r.parent && byName.has(r.parent)) parents.get(r.table_name)?.add(r.parent);
  }
  const ordered: CatalogTable[] = [];
  const placed = new Set<string>();
  while (placed.size < byName.size) {
    const ready = [...byName.keys()]
      .filter((name) => !placed.has(name) && [...(parents.get(name) ?? [])].every((p) => placed.has(p)))
      .sort();
    // A cycle of foreign keys between tables (none today): the rest by name; the load then fails
    // on the first row whose parent is not there yet, and rolls back.
    const next = ready.length > 0 ? ready : [...byName.keys()].filter((name) => !placed.has(name)).sort();
    for (const name of next) {
      placed.add(name);
      ordered.push(byName.get(name) as CatalogTable);
    }
  }
  return ordered;
}

async function catalogSequences(q: Queryable): Promise<string[]> {
  const rows = await q.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = current_schema() AND c.relkind = 'S' ORDER BY c.relname`,
  );
  return rows.map((r) => r.name);
}

/** What migrate.ts recorded in this database (empty lists where it never ran). */
export async function recordedVersion(q: Queryable): Promise<SchemaVersion> {
  const present = await q.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = current_schema() AND c.relname = ANY ($1::text[])`,
    [BOOKKEEPING_TABLES],
  );
  const has = new Set(present.map((r) => r.name));
  const migrations = has.has('schema_migrations')
    ? await q.query<{ version: number; name: string }>(
        'SELECT version, name FROM schema_migrations ORDER BY version',
      )
    : [];
  const functions = has.has('schema_functions')
    ? await q.query<{ name: string; checksum: string }>(
        'SELECT name, checksum FROM schema_functions ORDER BY name',
      )
    : [];
  return {
    migrations: migrations.map((m) => [Number(m.version), m.name]),
    functions: functions.map((f) => [f.name, f.checksum]),
  };
}

/** The schema version of this code: its migrations and function files. */
export async function codeVersion(): Promise<SchemaVersion> {
  return {
    migrations: (await loadMigrations()).map((m) => [m.version, m.name]),
    functions: (await loadFunctions()).map((f) => [f.name, f.checksum]),
  };
}

const versionLabels = (v: SchemaVersion) => [
  ...v.migrations.map(([n, name]) => `${String(n).padStart(4, '0')}_${name}`),
  ...v.functions.map(([name, sum]) => `functions/${name} (${sum.slice(0, 8)})`),
];

/** How two schema versions differ, in a few words; undefined when they are the same. */
export function versionDifference(
  a: SchemaVersion,
  b: SchemaVersion,
  names: [string, string],
): string | undefined {
  const left = versionLabels(a);
  const right = versionLabels(b);
  const onlyLeft = left.filter((x) => !right.includes(x));
  const onlyRight = right.filter((x) => !left.includes(x));
  if (onlyLeft.length === 0 && onlyRight.length === 0) return undefined;
  const list = (xs: string[]) =>
    xs.length > 3 ? `${xs.slice(0, 3).join(', ')} and ${xs.length - 3} more` : xs.join(', ');
  return [
    onlyLeft.length > 0 ? `only ${names[0]} has ${list(onlyLeft)}` : '',
    onlyRight.length > 0 ? `only ${names[1]} has ${list(onlyRight)}` : '',
  ]
    .filter(Boolean)
    .join('; ');
}

const latest = (v: SchemaVersion) => {
  const last = v.migrations.at(-1);
  return last ? `${String(last[0]).padStart(4, '0')}_${last[1]}` : 'no migrations';
};

// Text forms that read back the same on any server: set for the export's and the import's transaction.
const SESSION_SETTINGS = [
  "SET LOCAL DateStyle = 'ISO, YMD'",
  "SET LOCAL IntervalStyle = 'postgres'",
  "SET LOCAL TimeZone = 'UTC'",
  'SET LOCAL extra_float_digits = 1',
  "SET LOCAL bytea_output = 'hex'",
];

// ---------------------------------------------------------------------------------------------
// Export

export interface ExportSummary {
  tables: number;
  rows: number;
  sequences: number;
  schema: string;
  functions: number;
  bytes: number;
}

const FETCH_ROWS = 1000;

/**
 * Writes the whole database to `out` (gzip of JSON lines, mode 0600), read in one snapshot. The
 * file appears whole or not at all: it is written beside `out` and renamed at the end. Refuses a
 * database whose schema is not this code's (its migrations must be applied first).
 */
export async function exportDatabase(
  db: Db,
  out: string,
  info: { botpay?: string } = {},
): Promise<ExportSummary> {
  const code = await codeVersion();
  const partial = join(dirname(out), `.${basename(out)}.${process.pid}.partial`);
  const gzip = createGzip();
  const file = createWriteStream(partial, { mode: 0o600 });
  const written = pipeline(gzip, file);
  written.catch(() => {});
  const hash = createHash('sha256');
  const write = async (line: string) => {
    const text = `${line}\n`;
    hash.update(text);
    if (!gzip.write(text)) await Promise.race([once(gzip, 'drain'), written]);
  };
  try {
    const summary = await db.transaction(
      async (tx) => {
        // Before any other statement: the snapshot is taken by the first query.
        await tx.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
        for (const setting of SESSION_SETTINGS) await tx.query(setting);
        const schema = await recordedVersion(tx);
        const behind = versionDifference(schema, code, ['the database', 'this botpay']);
        if (behind) {
          throw new TransferError(
            `The database is not at this botpay's schema version (${behind}): run \`botpay migrate\` with this version first, then export again.`,
          );
        }
        const header: Header = {
          format: EXPORT_FORMAT,
          format_version: EXPORT_FORMAT_VERSION,
          exported_at: new Date().toISOString(),
          ...(info.botpay ? { botpay: info.botpay } : {}),
          database: db.kind,
          schema,
        };
        await write(JSON.stringify(header));
        const counts: Record<string, number> = {};
        let total = 0;
        const tables = await catalogTables(tx);
        for (const table of tables) {
          await write(JSON.stringify({ table: table.name, columns: table.columns.map((c) => c.name) }));
          const values = table.columns.map((c) => `${ident(c.name)}::text`).join(', ');
          await tx.query(
            `DECLARE botpay_export NO SCROLL CURSOR FOR SELECT array_to_json(ARRAY[${values}])::text AS line FROM ${ident(table.name)}`,
          );
          let n = 0;
          for (;;) {
            const rows = await tx.query<{ line: string }>(`FETCH ${FETCH_ROWS} FROM botpay_export`);
            for (const row of rows) await write(row.line);
            n += rows.length;
            if (rows.length < FETCH_ROWS) break;
          }
          await tx.query('CLOSE botpay_export');
          counts[table.name] = n;
          total += n;
        }
        // Read after the rows: a sequence is not part of the snapshot, and a value read later is
        // never below one the rows used.
        const sequences: SequenceValue[] = [];
        for (const name of await catalogSequences(tx)) {
          const [value] = await tx.query<{ last_value: string; is_called: boolean }>(
            `SELECT last_value::text AS last_value, is_called FROM ${ident(name)}`,
          );
          if (value) sequences.push([name, value.last_value, value.is_called]);
        }
        await write(JSON.stringify({ sequences }));
        const end = { end: { rows: counts, sha256: hash.copy().digest('hex') } };
        const endLine = `${JSON.stringify(end)}\n`;
        gzip.end(endLine);
        await written;
        return {
          tables: tables.length,
          rows: total,
          sequences: sequences.length,
          schema: latest(schema),
          functions: schema.functions.length,
        };
      },
      { retries: 0 },
    );
    await rename(partial, out);
    return { ...summary, bytes: (await stat(out)).size };
  } catch (error) {
    gzip.destroy();
    await written.catch(() => {});
    await rm(partial, { force: true });
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------
// Reading a file

interface ReadVisitor {
  /** A batch of one table's row lines (JSON arrays, as in the file). */
  rows?(table: FileTable, lines: string[]): Promise<void>;
}

const ROW_BATCH = 500;

function isSchemaVersion(value: unknown): value is SchemaVersion {
  const v = value as SchemaVersion | undefined;
  return (
    typeof v === 'object' &&
    v !== null &&
    Array.isArray(v.migrations) &&
    v.migrations.every(
      (m) => Array.isArray(m) && m.length === 2 && Number.isInteger(m[0]) && typeof m[1] === 'string',
    ) &&
    Array.isArray(v.functions) &&
    v.functions.every(
      (f) => Array.isArray(f) && f.length === 2 && typeof f[0] === 'string' && typeof f[1] === 'string',
    )
  );
}

/** The lines of a gzip file, without their newline (none after the last newline). */
async function* gzipLines(path: string): AsyncGenerator<string> {
  const gunzip = createGunzip();
  const source = createReadStream(path);
  source.on('error', (error) => gunzip.destroy(error));
  source.pipe(gunzip);
  const decoder = new StringDecoder('utf8');
  let rest = '';
  for await (const chunk of gunzip) {
    rest += decoder.write(chunk as Buffer);
    let at = rest.indexOf('\n');
    while (at >= 0) {
      yield rest.slice(0, at);
      rest = rest.slice(at + 1);
      at = rest.indexOf('\n');
    }
  }
  rest += decoder.end();
  if (rest !== '') yield rest;
}

function gzipProblem(error: unknown): string | undefined {
  const e = error as NodeJS.ErrnoException;
  if (e.code === 'Z_BUF_ERROR' || /unexpected end of file/i.test(e.message ?? ''))
    return 'the file ends in the middle (truncated?)';
  if (e.code === 'Z_DATA_ERROR') return `it is not an intact gzip file (${e.message})`;
  if (e.code === 'ENOENT') return 'there is no such file';
  if (e.code === 'EACCES' || e.code === 'EISDIR') return `it cannot be read (${e.code})`;
  return undefined;
}

/**
 * Reads and checks a whole export file: its structure line by line, every row's width, the row
 * counts and the checksum of its end line. `visitor.rows` gets the rows in batches as they come.
 */
export async function readExport(path: string, visitor: ReadVisitor = {}): Promise<ExportContents> {
  const refuse = (reason: string) =>
    new TransferError(`${path} is not a usable botpay export: ${reason}. Nothing was imported.`);
  const hash = createHash('sha256');
  let header: Header | undefined;
  const tables: FileTable[] = [];
  let sequences: SequenceValue[] | undefined;
  let ended = false;
  let current: FileTable | undefined;
  let batch: string[] = [];
  let lineNo = 0;
  const flush = async () => {
    if (current && batch.length > 0 && visitor.rows) await visitor.rows(current, batch);
    batch = [];
  };
  try {
    for await (const line of gzipLines(path)) {
      lineNo++;
      if (ended) throw refuse(`line ${lineNo} comes after the end line`);
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch {
        throw refuse(`line ${lineNo} is not JSON`);
      }
      if (lineNo === 1) {
        const h = value as Partial<Header>;
        if (h?.format !== EXPORT_FORMAT) throw refuse('its first line is not a botpay export header');
        if (h.format_version !== EXPORT_FORMAT_VERSION)
          throw refuse(
            `it is format ${String(h.format_version)}, this botpay reads format ${EXPORT_FORMAT_VERSION}`,
          );
        if (!isSchemaVersion(h.schema) || typeof h.exported_at !== 'string')
          throw refuse('its header has no schema version');
        header = h as Header;
        hash.update(`${line}\n`);
        continue;
      }
      if (Array.isArray(value)) {
        if (!current || sequences) throw refuse(`line ${lineNo} is a row outside a table`);
        if (
          value.length !== current.columns.length ||
          !value.every((v) => v === null || typeof v === 'string')
        )
          throw refuse(`line ${lineNo} is not a row of ${current.table}'s ${current.columns.length} columns`);
        current.rows++;
        batch.push(line);
        if (batch.length >= ROW_BATCH) await flush();
        hash.update(`${line}\n`);
        continue;
      }
      const record = value as Record<string, unknown>;
      if (typeof record?.table === 'string') {
        if (sequences) throw refuse(`line ${lineNo} starts a table after the sequences`);
        const columns = record.columns;
        if (
          !Array.isArray(columns) ||
          columns.length === 0 ||
          !columns.every((c) => typeof c === 'string') ||
          new Set(columns).size !== columns.length
        )
          throw refuse(`line ${lineNo} names no columns for ${record.table}`);
        if (tables.some((t) => t.table === record.table))
          throw refuse(`table ${record.table} comes twice (line ${lineNo})`);
        await flush();
        current = { table: record.table, columns: columns as string[], rows: 0 };
        tables.push(current);
        hash.update(`${line}\n`);
        continue;
      }
      if (Array.isArray(record?.sequences)) {
        if (sequences) throw refuse(`line ${lineNo} gives the sequences again`);
        const list = record.sequences as unknown[];
        if (
          !list.every(
            (s) =>
              Array.isArray(s) &&
              s.length === 3 &&
              typeof s[0] === 'string' &&
              typeof s[1] === 'string' &&
              /^-?\d+$/.test(s[1]) &&
              typeof s[2] === 'boolean',
          )
        )
          throw refuse(`line ${lineNo}: a sequence is not [name, value, is_called]`);
        await flush();
        sequences = list as SequenceValue[];
        hash.update(`${line}\n`);
        continue;
      }
      const end = record?.end as { rows?: Record<string, unknown>; sha256?: unknown } | undefined;
      if (end && typeof end === 'object') {
        if (!sequences) throw refuse(`line ${lineNo} ends the file before its sequences`);
        if (end.sha256 !== hash.digest('hex'))
          throw refuse('its checksum does not match its contents (the file was changed or damaged)');
        const said = end.rows ?? {};
        const counted = Object.fromEntries(tables.map((t) => [t.table, t.rows]));
        for (const name of new Set([...Object.keys(said), ...Object.keys(counted)])) {
          if (said[name] !== counted[name])
            throw refuse(
              `its end line says ${String(said[name] ?? 0)} rows of ${name}, the file holds ${counted[name] ?? 0}`,
            );
        }
        ended = true;
        continue;
      }
      throw refuse(`line ${lineNo} is not a line of an export`);
    }
  } catch (error) {
    if (error instanceof TransferError) throw error;
    const problem = gzipProblem(error);
    if (problem) throw refuse(problem);
    throw error;
  }
  if (!header) throw refuse('it is empty');
  if (!ended) throw refuse('it ends before its end line (truncated?)');
  return { header, tables, sequences: sequences ?? [] };
}

// ---------------------------------------------------------------------------------------------
// Import

export interface ImportSummary {
  rows: number;
  tables: Array<{ table: string; rows: number }>;
  sequences: number;
  secretsChecked: number;
  header: Header;
}

/** Tables of the current schema (migrate.ts's own aside) that hold at least one row. */
async function tablesWithRows(q: Queryable): Promise<string[]> {
  const names = (await catalogTables(q)).map((t) => t.name);
  const found: string[] = [];
  for (const name of names) {
    const [row] = await q.query<{ any: boolean }>(`SELECT EXISTS (SELECT 1 FROM ${ident(name)}) AS any`);
    if (row?.any) found.push(name);
  }
  return found;
}

const listed = (names: string[]) =>
  names.length > 4 ? `${names.slice(0, 4).join(', ')} and ${names.length - 4} more` : names.join(', ');

/**
 * Loads an export file into `db` (PostgreSQL), which must hold no data: checks the whole file,
 * migrates the target to the file's schema version (this code's; another is refused), then loads
 * every row in one transaction that commits only when the counts, the ledger and SECRET_KEY check
 * out. Throws TransferError (nothing changed but, at most, the migrations of an empty database).
 */
export async function importDatabase(
  db: Db,
  path: string,
  options: { secretKey: string },
): Promise<ImportSummary> {
  const contents = await readExport(path);
  const { header } = contents;
  const code = await codeVersion();
  const differs = versionDifference(header.schema, code, ['the file', 'this botpay']);
  if (differs) {
    throw new TransferError(
      `The file's schema version is not this botpay's (${differs}): import it with the botpay that exported it${header.botpay ? ` (${header.botpay})` : ''}, or run this version's \`botpay migrate\` on the source and export again. Nothing was imported.`,
    );
  }
  const occupied = await tablesWithRows(db);
  if (occupied.length > 0) {
    throw new TransferError(
      `The target database already holds data (rows in ${listed(occupied)}): import only into an empty database. Nothing was imported.`,
    );
  }
  await migrate(db);
  const target = await recordedVersion(db);
  const ahead = versionDifference(target, code, ['the target', 'this botpay']);
  if (ahead) {
    throw new TransferError(
      `The target database is at another schema version than this botpay's (${ahead}). Nothing was imported.`,
    );
  }
  const tables = await catalogTables(db);
  const fileTables = new Map(contents.tables.map((t) => [t.table, t]));
  const mismatch: string[] = [];
  for (const t of tables) {
    const f = fileTables.get(t.name);
    const names = t.columns.map((c) => c.name);
    if (!f) mismatch.push(`${t.name} is not in the file`);
    else if (f.columns.length !== names.length || !f.columns.every((c) => names.includes(c)))
      mismatch.push(`${t.name}'s columns differ`);
  }
  for (const f of contents.tables) {
    if (!tables.some((t) => t.name === f.table)) mismatch.push(`the file's ${f.table} is not in the target`);
  }
  const sequenceNames = await catalogSequences(db);
  for (const [name] of contents.sequences) {
    if (!sequenceNames.includes(name)) mismatch.push(`the file's sequence ${name} is not in the target`);
  }
  if (mismatch.length > 0) {
    throw new TransferError(
      `The target's tables do not match the file's although both are at schema ${latest(code)} (${listed(mismatch)}). Nothing was imported.`,
    );
  }

  try {
    return await db.transaction(
      async (tx) => {
        for (const setting of SESSION_SETTINGS) await tx.query(setting);
        // No other session writes while the rows load, and the target is still empty.
        await tx.query(`LOCK TABLE ${tables.map((t) => ident(t.name)).join(', ')} IN EXCLUSIVE MODE`);
        const late = await tablesWithRows(tx);
        if (late.length > 0) {
          throw new TransferError(
            `The target database received data meanwhile (rows in ${listed(late)}): is a service running on it? Nothing was imported.`,
          );
        }
        const triggers = await tx.query<{ table_name: string; name: string; enabled: string }>(
          `SELECT c.relname AS table_name, t.tgname AS name, t.tgenabled::text AS enabled
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND NOT t.tgisinternal AND t.tgenabled <> 'D' AND c.relname = ANY ($1::text[])
            ORDER BY 1, 2`,
          [tables.map((t) => t.name)],
        );
        for (const t of triggers)
          await tx.query(`ALTER TABLE ${ident(t.table_name)} DISABLE TRIGGER ${ident(t.name)}`);

        const staging = new Map<string, string>();
        for (const [i, t] of contents.tables.entries()) {
          const name = `botpay_import_${i}`;
          staging.set(t.table, name);
          await tx.query(`CREATE TEMPORARY TABLE ${name} (r json NOT NULL) ON COMMIT DROP`);
        }
        await readExport(path, {
          async rows(table, lines) {
            await tx.query(
              `INSERT INTO pg_temp.${staging.get(table.table)} (r) SELECT value FROM json_array_elements($1::json)`,
              [`[${lines.join(',')}]`],
            );
          },
        });
        for (const t of tables) {
          const f = fileTables.get(t.name) as FileTable;
          const columns = t.columns.map((c) => ident(c.name)).join(', ');
          const values = t.columns.map((c) => `(r->>${f.columns.indexOf(c.name)})::${c.type}`).join(', ');
          await tx.query(
            `INSERT INTO ${ident(t.name)} (${columns}) OVERRIDING SYSTEM VALUE SELECT ${values} FROM pg_temp.${staging.get(t.name)}`,
          );
        }
        for (const [name, value, isCalled] of contents.sequences) {
          await tx.query('SELECT setval($1::regclass, $2::bigint, $3::boolean)', [
            ident(name),
            value,
            isCalled,
          ]);
        }

        const restore: Record<string, string> = { O: 'ENABLE', A: 'ENABLE ALWAYS', R: 'ENABLE REPLICA' };
        for (const t of triggers) {
          await tx.query(
            `ALTER TABLE ${ident(t.table_name)} ${restore[t.enabled] ?? 'ENABLE'} TRIGGER ${ident(t.name)}`,
          );
        }

        const loaded: Array<{ table: string; rows: number }> = [];
        for (const t of tables) {
          const [row] = await tx.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${ident(t.name)}`);
          const n = Number(row?.n ?? 0);
          const expected = fileTables.get(t.name)?.rows ?? 0;
          if (n !== expected) {
            throw new TransferError(
              `${t.name} holds ${n} rows after the load, the file ${expected}: the import was rolled back.`,
              1,
            );
          }
          loaded.push({ table: t.name, rows: n });
        }
        const drift = await walletLedgerDrift(tx);
        if (drift > 0) {
          throw new TransferError(
            `${drift} wallets differ from their ledger entries after the load (\`botpay doctor\` on the source says the same?): the import was rolled back.`,
            1,
          );
        }
        const secrets = await sampleStoredSecrets(tx, createSecretBox(options.secretKey));
        if (secrets.failures > 0) {
          throw new TransferError(
            `SECRET_KEY does not decrypt ${secrets.failures} of ${secrets.checked} stored secrets: set it to the key the exported installation used (an embedded one keeps it in DATA_DIR/secret_key). Nothing was imported.`,
          );
        }
        return {
          rows: loaded.reduce((sum, t) => sum + t.rows, 0),
          tables: loaded,
          sequences: contents.sequences.length,
          secretsChecked: secrets.checked,
          header,
        };
      },
      { retries: 0 },
    );
  } catch (error) {
    if (error instanceof TransferError) throw error;
    const code = pgErrorCode(error);
    const message = (error as Error).message;
    if (code === '42501') {
      throw new TransferError(
        `The database user may not load the tables (${message}): import as the user that owns them, the one that runs \`botpay migrate\`. Nothing was imported.`,
      );
    }
    if (code) {
      throw new TransferError(`The load failed and was rolled back: ${message} (${code}).`, 1);
    }
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------
// Commands

const wrap = <T>(work: () => Promise<T>) =>
  work().then(
    (value) => ({ value }),
    (error: unknown) => {
      if (error instanceof TransferError) {
        console.error(error.message);
        return { code: error.exitCode };
      }
      throw error;
    },
  );

export async function exportCommand(args: string[], options: { version?: string }): Promise<number> {
  const { values } = parseArgs({ args, options: { out: { type: 'string' } } });
  if (!values.out) {
    console.error('botpay export: --out is missing: give the file to write (--out botpay-export.jsonl.gz)');
    return 2;
  }
  const out = resolve(values.out);
  if (
    await access(out).then(
      () => true,
      () => false,
    )
  ) {
    console.error(`botpay export: ${out} exists: choose another name, or remove it first.`);
    return 2;
  }
  const config = parseConfig();
  let source = 'PostgreSQL (DATABASE_URL)';
  if (!config.databaseUrl) {
    const dir = resolve(config.dataDir);
    if (!isDataDir(join(dir, 'pg'))) {
      console.error(`botpay export: there is no embedded database in DATA_DIR (${dir}): nothing to export.`);
      return 2;
    }
    source = `the embedded database in ${dir}`;
  }
  // Embedded: refused with one line (DataDirBusyError, exit 2) while the service holds DATA_DIR —
  // PGlite has no access from a second process.
  const db = await openDatabase(config);
  try {
    const result = await wrap(() => exportDatabase(db, out, { botpay: options.version }));
    if (!('value' in result)) return result.code;
    const s = result.value;
    console.log(
      `Exported ${s.rows} rows of ${s.tables} tables and ${s.sequences} sequences (schema ${s.schema}, ${s.functions} function files) from ${source} to ${out} (${Math.ceil(s.bytes / 1024)} KB).`,
    );
    console.error(
      'The file holds hashed keys and encrypted secrets, not SECRET_KEY: keep it as private as the database. Import it with: botpay import --in FILE',
    );
    return 0;
  } finally {
    await db.close();
  }
}

export async function importCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { in: { type: 'string' } } });
  if (!values.in) {
    console.error(
      'botpay import: --in is missing: give the file `botpay export` wrote (--in botpay-export.jsonl.gz)',
    );
    return 2;
  }
  const path = resolve(values.in);
  if (!process.env.DATABASE_URL?.trim()) {
    console.error(
      'botpay import: DATABASE_URL is not set: import loads a PostgreSQL database (to move an embedded database to another machine, copy its DATA_DIR instead).',
    );
    return 2;
  }
  if (!process.env.SECRET_KEY?.trim()) {
    console.error(
      'botpay import: SECRET_KEY is not set: give the key the exported installation used (an embedded one keeps it in DATA_DIR/secret_key); a new key cannot decrypt the stored secrets.',
    );
    return 2;
  }
  const config = parseConfig();
  // Read before connecting: a file that is not there is said first.
  const readable = await access(path).then(
    () => undefined,
    (error: NodeJS.ErrnoException) => error.code ?? 'unreadable',
  );
  if (readable) {
    console.error(`botpay import: cannot read ${path} (${readable}).`);
    return 2;
  }
  const db = await openDatabase(config);
  try {
    const result = await wrap(() => importDatabase(db, path, { secretKey: config.secretKey as string }));
    if (!('value' in result)) return result.code;
    const s = result.value;
    const biggest = [...s.tables]
      .filter((t) => t.rows > 0)
      .sort((a, b) => b.rows - a.rows || a.table.localeCompare(b.table))
      .slice(0, 6)
      .map((t) => `${t.table} ${t.rows}`)
      .join(', ');
    console.log(
      `Imported ${s.rows} rows into ${s.tables.length} tables (${biggest || 'all empty'}) and set ${s.sequences} sequences, from ${s.header.database === 'pglite' ? 'an embedded database' : 'a PostgreSQL database'} exported at ${s.header.exported_at}.`,
    );
    console.log('Checked: row counts equal the file’s; wallet balances equal their ledger entries;');
    console.log(
      `SECRET_KEY decrypts the stored secrets (${s.secretsChecked} checked). Start the service on DATABASE_URL.`,
    );
    return 0;
  } finally {
    await db.close();
  }
}
