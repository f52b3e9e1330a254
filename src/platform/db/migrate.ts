import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Db } from './port.ts';

// Numbered, forward-only migrations (src/migrations/NNNN_name.sql), applied at start-up in one
// transaction behind an advisory lock, so two instances starting at once apply each exactly once.

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));
const MIGRATION_LOCK = 7_254_001;

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export async function loadMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f)).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    migrations.push({
      version: Number(file.slice(0, 4)),
      name: file.slice(5, -4),
      sql: await readFile(new URL(file, `file://${dir.endsWith('/') ? dir : `${dir}/`}`), 'utf8'),
    });
  }
  // Numbers are reserved per feature area, so gaps are fine; a number used twice is not.
  for (let i = 1; i < migrations.length; i++) {
    if (migrations[i]!.version <= migrations[i - 1]!.version)
      throw new Error(`migration number used twice (${files[i]})`);
  }
  return migrations;
}

/** Applies pending migrations; returns the versions it applied. */
export async function migrate(db: Db, migrations?: Migration[]): Promise<number[]> {
  const all = migrations ?? (await loadMigrations());
  return db.transaction(
    async (tx) => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await tx.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
      const done = new Set(
        (await tx.query<{ version: number }>('SELECT version FROM schema_migrations')).map((r) => r.version),
      );
      const applied: number[] = [];
      for (const m of all) {
        if (done.has(m.version)) continue;
        await tx.exec(m.sql);
        await tx.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
        applied.push(m.version);
      }
      return applied;
    },
    { retries: 0 },
  );
}

/** For /readyz and `doctor`: true when every known migration is applied. */
export async function migrationsApplied(db: Db, migrations?: Migration[]): Promise<boolean> {
  const all = migrations ?? (await loadMigrations());
  try {
    const rows = await db.query<{ version: number }>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((r) => r.version));
    return all.every((m) => applied.has(m.version));
  } catch {
    return false;
  }
}
