import pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  loadFunctions,
  loadMigrations,
  migrate,
  migrationsApplied,
  STOPS_EARLIER_VERSIONS,
  sha256,
} from '../../src/platform/db/migrate.ts';
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

  it('function files are applied by checksum: recorded, skipped when unchanged, re-applied when changed', async () => {
    const { db, drop } = await createTestDatabase();
    try {
      const recorded = await db.query<{ name: string; checksum: string }>(
        'SELECT name, checksum FROM schema_functions ORDER BY name',
      );
      expect(recorded).toEqual((await loadFunctions()).map((f) => ({ name: f.name, checksum: f.checksum })));
      expect(recorded.map((r) => r.name)).toEqual(
        expect.arrayContaining(['spend_run', 'ledger_apply_entry']),
      );
      const probe = (n: number) => {
        const sql = `CREATE OR REPLACE FUNCTION probe_fn() RETURNS integer LANGUAGE sql AS $$ SELECT ${n} $$;`;
        return [...fnsBase, { name: 'probe_fn', sql, checksum: sha256(sql) }];
      };
      const fnsBase = await loadFunctions();
      await migrate(db, undefined, probe(1));
      expect((await db.query<{ v: number }>('SELECT probe_fn() AS v'))[0]!.v).toBe(1);
      // Same checksum: not run again (a dropped function stays dropped until its file changes).
      await db.query('DROP FUNCTION probe_fn()');
      await migrate(db, undefined, probe(1));
      expect(await db.query("SELECT 1 FROM pg_proc WHERE proname = 'probe_fn'")).toEqual([]);
      expect(await migrationsApplied(db, undefined, probe(1))).toBe(true);
      // Changed file: /readyz reports it, start-up applies it.
      expect(await migrationsApplied(db, undefined, probe(2))).toBe(false);
      await migrate(db, undefined, probe(2));
      expect((await db.query<{ v: number }>('SELECT probe_fn() AS v'))[0]!.v).toBe(2);
    } finally {
      await drop();
    }
  });

  it('every function of the schema has one definition, in a file of src/migrations/functions/', async () => {
    // A function left defined only in a migration is changed by writing a new migration, which
    // is how definitions drifted apart; an overload kept beside a newer signature outlives its
    // purpose unnoticed.
    const { db, drop } = await createTestDatabase();
    try {
      const rows = await db.query<{ name: string; n: number }>(
        `SELECT p.proname AS name, count(*)::int AS n FROM pg_proc p
           JOIN pg_namespace s ON s.oid = p.pronamespace
          WHERE s.nspname = current_schema() GROUP BY 1 ORDER BY 1`,
      );
      const files = (await loadFunctions()).map((f) => f.sql).join('\n');
      const defined = (name: string) => new RegExp(`CREATE OR REPLACE FUNCTION ${name}\\(`).test(files);
      expect(rows.filter((r) => !defined(r.name)).map((r) => r.name)).toEqual([]);
      expect(rows.filter((r) => r.n > 1)).toEqual([]);
      expect(rows.map((r) => r.name)).toEqual(expect.arrayContaining(['botpay_notify', 'notify_bot_state']));
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
      const fns = await dbs[0]!.query<{ name: string }>('SELECT name FROM schema_functions ORDER BY name');
      expect(fns.map((f) => f.name)).toEqual((await loadFunctions()).map((f) => f.name));
    } finally {
      await Promise.all(dbs.map((db) => db.close()));
      await admin.query(`DROP SCHEMA ${schema} CASCADE`);
      await admin.end();
    }
  });

  it('no function sets a custom parameter in its definition (only a superuser may create one that does)', async () => {
    // PostgreSQL refuses `CREATE FUNCTION … SET botpay.x = …` to any other user ("permission denied
    // to set parameter"), and the service's database user is the owner of its schema, not a
    // superuser (docs/deploy.md): such a function would stop every migration there. (A clause of
    // the definition is followed by another clause or by AS $$; a SET in the body runs as the
    // caller and is allowed.)
    const offending = (await loadFunctions()).filter((f) =>
      /\bSET\s+[a-z_]+\.[a-z_]+\s*(=|TO)\s*('[^']*'|\S+)\s+(SET\b|AS\s+\$)/i.test(f.sql),
    );
    expect(offending.map((f) => f.name)).toEqual([]);
  });

  it.runIf(isPostgres)('apply as a database user that owns its schema and is not a superuser', async () => {
    const schema = `t_${randomBase32(12)}`;
    const role = `botpay_owner_${randomBase32(8)}`;
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    const { rows } = await admin.query<{ ok: boolean }>(
      'SELECT rolsuper OR rolcreaterole AS ok FROM pg_roles WHERE rolname = current_user',
    );
    if (!rows[0]?.ok) {
      await admin.end();
      return; // the test's user may not create roles: nothing to play here
    }
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'owner' NOSUPERUSER NOCREATEROLE`);
    await admin.query(`CREATE SCHEMA ${schema} AUTHORIZATION ${role}`);
    const url = new URL(POSTGRES_URL);
    url.username = role;
    url.password = 'owner';
    const db = await openPostgres({ connectionString: url.toString(), schema, max: 2 });
    try {
      expect(await migrate(db)).toEqual((await loadMigrations()).map((m) => m.version));
      // The worker's recording call, which marks its own queue writes, runs for this user too.
      const recorded = await db.query(
        `SELECT * FROM webhook_record_and_claim(ARRAY['whd_x'], ARRAY['t'], ARRAY[true], ARRAY[200], ARRAY[''],
           ARRAY[NULL::text], ARRAY[1], ARRAY['direct'], now(), ARRAY[10], ARRAY[]::text[], ARRAY[]::boolean[],
           ARRAY[]::integer[], 3, 10, now(), 'tok', 4, 0, ARRAY[]::text[], 10)`,
      );
      expect(recorded).toEqual([]);
    } finally {
      await db.close();
      await admin.query(`DROP SCHEMA ${schema} CASCADE`);
      await admin.query(`DROP ROLE IF EXISTS ${role}`);
      await admin.end();
    }
  });

  it('an instance of the previous version leaves the newer function files in place and stays ready', async () => {
    const { db, drop } = await createTestDatabase();
    try {
      const all = await loadMigrations();
      const fns = await loadFunctions();
      const probe = (n: number) => {
        const sql = `CREATE OR REPLACE FUNCTION probe_fn() RETURNS integer LANGUAGE sql AS $$ SELECT ${n} $$;`;
        return [...fns, { name: 'probe_fn', sql, checksum: sha256(sql) }];
      };
      // The new version (every migration, probe_fn 2) migrated; the previous one (without the
      // newest migration, probe_fn 1) restarts during the rolling deploy.
      await migrate(db, all, probe(2));
      const previous = all.slice(0, -1);
      expect(await migrate(db, previous, probe(1))).toEqual([]);
      expect((await db.query<{ v: number }>('SELECT probe_fn() AS v'))[0]!.v).toBe(2);
      expect(
        (
          await db.query<{ checksum: string }>(
            "SELECT checksum FROM schema_functions WHERE name = 'probe_fn'",
          )
        )[0]?.checksum,
      ).toBe(probe(2).at(-1)!.checksum);
      expect(await migrationsApplied(db, previous, probe(1))).toBe(true);
      // The same migrations with another file are still a schema behind its code.
      expect(await migrationsApplied(db, all, probe(1))).toBe(false);
    } finally {
      await drop();
    }
  });

  it('a migration that stops earlier versions keeps them from migrating and from being ready', async () => {
    const { db, drop } = await createTestDatabase();
    try {
      const all = await loadMigrations();
      const fns = await loadFunctions();
      const next = Math.max(...all.map((m) => m.version)) + 1;
      const stopping = { version: next, name: 'probe_stop', sql: `${STOPS_EARLIER_VERSIONS}\nSELECT 1;` };
      const additive = { version: next + 1, name: 'probe_add', sql: 'SELECT 1;' };
      // An additive migration alone leaves the previous version running (the test above)...
      expect(await migrate(db, [...all, additive], fns)).toEqual([additive.version]);
      expect(await migrationsApplied(db, all, fns)).toBe(true);
      expect(await migrate(db, all, fns)).toEqual([]);
      // ...one that stops earlier versions does not: they refuse to migrate and are not ready.
      expect(await migrate(db, [...all, stopping, additive], fns)).toEqual([stopping.version]);
      await expect(migrate(db, all, fns)).rejects.toThrow(
        new RegExp(`newer version, whose migration ${next} earlier versions must not run beside`),
      );
      expect(await migrationsApplied(db, all, fns)).toBe(false);
      // The version that carries it (and any later one) is unaffected.
      expect(await migrate(db, [...all, stopping, additive], fns)).toEqual([]);
      expect(await migrationsApplied(db, [...all, stopping, additive], fns)).toBe(true);
      expect(await migrationsApplied(db, [...all, stopping], fns)).toBe(true);
    } finally {
      await drop();
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
