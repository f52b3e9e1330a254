import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { loadMigrations, migrate, migrationsApplied } from '../../src/platform/db/migrate.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import { randomBase32 } from '../../src/platform/ids.ts';
import { createTestDatabase, isPostgres, POSTGRES_URL } from '../support/db.ts';
import { createTestService } from '../support/service.ts';

describe('migrations', () => {
  it('are recorded, and applying again is a no-op', async () => {
    const { db, drop } = await createTestDatabase();
    try {
      expect(await migrate(db)).toEqual([]);
      expect(await migrationsApplied(db)).toBe(true);
      const versions = await db.query<{ version: number }>(
        'SELECT version FROM schema_migrations ORDER BY version',
      );
      expect(versions.map((v) => v.version)).toEqual((await loadMigrations()).map((m) => m.version));
    } finally {
      await drop();
    }
  });

  it.runIf(isPostgres)('apply exactly once when several instances start at once', async () => {
    const schema = `t_${randomBase32(12)}`;
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    await admin.query(`CREATE SCHEMA ${schema}`);
    const dbs = await Promise.all(
      [1, 2, 3, 4].map(() => openPostgres({ connectionString: POSTGRES_URL, schema, max: 2 })),
    );
    try {
      const results = await Promise.all(dbs.map((db) => migrate(db)));
      const all = results.flat();
      expect(all.sort((a, b) => a - b)).toEqual((await loadMigrations()).map((m) => m.version));
      expect(results.filter((r) => r.length > 0)).toHaveLength(1);
    } finally {
      await Promise.all(dbs.map((db) => db.close()));
      await admin.query(`DROP SCHEMA ${schema} CASCADE`);
      await admin.end();
    }
  });

  it('readyz reports not ready when a migration is missing and ready when applied', async () => {
    const svc = await createTestService();
    try {
      expect((await svc.app.inject({ url: '/readyz' })).statusCode).toBe(200);
      await svc.ctx.db.query('DELETE FROM schema_migrations WHERE version = 1');
      const res = await svc.app.inject({ url: '/readyz' });
      expect(res.statusCode).toBe(503);
      expect(res.json().reason).toMatch(/migrations/);
      expect((await svc.app.inject({ url: '/healthz' })).statusCode).toBe(200);
    } finally {
      await svc.close();
    }
  });
});
