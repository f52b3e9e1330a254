import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { randomBase32 } from '../../src/platform/ids.ts';
import { migrate } from '../../src/platform/db/migrate.ts';
import { openPglite } from '../../src/platform/db/pglite.ts';
import type { Db } from '../../src/platform/db/port.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';

export const TEST_DB = process.env.TEST_DB === 'postgres' ? 'postgres' : 'pglite';
export const isPostgres = TEST_DB === 'postgres';
export const POSTGRES_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface TestDatabase {
  db: Db;
  /** For PostgreSQL: the schema this test owns (other processes can join it with `connectionFor`). */
  schema?: string;
  drop(): Promise<void>;
}

/** A migrated, empty database of the leg under test: a fresh schema (PostgreSQL) or a template copy (PGlite). */
export async function createTestDatabase(options: { poolSize?: number } = {}): Promise<TestDatabase> {
  if (isPostgres) {
    const schema = `t_${randomBase32(12)}`;
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    await admin.query(`CREATE SCHEMA ${schema}`);
    await admin.end();
    const db = await openPostgres({ connectionString: POSTGRES_URL, schema, max: options.poolSize ?? 20 });
    await migrate(db);
    return {
      db,
      schema,
      async drop() {
        await db.close().catch(() => {});
        const c = new pg.Client({ connectionString: POSTGRES_URL });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await c.end();
      },
    };
  }
  const template = await readFile(join(process.cwd(), 'test-artifacts', 'pglite-template.tar.gz'));
  const db = await openPglite({ loadDataDir: new Blob([template]) });
  await migrate(db); // no-op unless the template is stale
  return {
    db,
    async drop() {
      await db.close();
    },
  };
}

/**
 * A database of the leg under test with no migration applied (a fresh schema, or a new PGlite):
 * for tests that build a previous version's database and migrate it.
 */
export async function createEmptyDatabase(): Promise<{ db: Db; drop: () => Promise<void> }> {
  if (!isPostgres) {
    const db = await openPglite({});
    return { db, drop: () => db.close() };
  }
  const schema = `t_${randomBase32(12)}`;
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.end();
  const db = await openPostgres({ connectionString: POSTGRES_URL, schema, max: 4 });
  return {
    db,
    async drop() {
      await db.close();
      const c = new pg.Client({ connectionString: POSTGRES_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await c.end();
    },
  };
}

/** DATABASE_URL for a child process that must share this test's PostgreSQL schema. */
export function connectionFor(schema: string): string {
  const url = new URL(POSTGRES_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return url.toString();
}
