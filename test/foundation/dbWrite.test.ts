import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prepared, preparedName } from '../../src/platform/db/port.ts';
import { createTestDatabase, isPostgres, type TestDatabase } from '../support/db.ts';

// Db.write: one statement that writes, in a transaction of its own (the checkout's call runs so,
// src/checkout/service.ts). Both drivers: it commits when it succeeds and leaves nothing when it
// fails. PostgreSQL: a marked statement is prepared, and a deadlock is retried as a transaction's
// would be (the statement that lost left nothing, so running it again is safe).
describe('Db.write', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase({ poolSize: 4 });
    await database.db.exec(`
      CREATE TABLE write_rows (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
      INSERT INTO write_rows (id) VALUES (1), (2);
      -- Adds to row a, waits, adds to row b: two calls in opposite orders deadlock.
      CREATE FUNCTION write_two(a int, b int, pause float8) RETURNS int LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE write_rows SET n = n + 1 WHERE id = a;
        PERFORM pg_sleep(pause);
        UPDATE write_rows SET n = n + 1 WHERE id = b;
        RETURN 1;
      END $$;
      CREATE FUNCTION write_then_fail() RETURNS int LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE write_rows SET n = n + 100 WHERE id = 1;
        RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = '{"error":"refused"}';
      END $$;`);
  });
  afterAll(async () => {
    await database.drop();
  });

  const counts = () =>
    database.db.query<{ id: number; n: number }>('SELECT id, n FROM write_rows ORDER BY id');

  it('commits a statement that succeeds and leaves nothing of one that fails', async () => {
    await database.db.exec('UPDATE write_rows SET n = 0');
    expect(await database.db.write('SELECT write_two(1, 2, 0) AS r')).toEqual([{ r: 1 }]);
    await expect(database.db.write('SELECT write_then_fail() AS r')).rejects.toMatchObject({
      code: 'BP001',
      message: '{"error":"refused"}',
    });
    expect(await counts()).toEqual([
      { id: 1, n: 1 },
      { id: 2, n: 1 },
    ]);
  });

  it.runIf(isPostgres)('retries a statement that lost a deadlock: both calls take effect', async () => {
    await database.db.exec('UPDATE write_rows SET n = 0');
    const results = await Promise.allSettled([
      database.db.write('SELECT write_two(1, 2, 0.3) AS r'),
      database.db.write('SELECT write_two(2, 1, 0.3) AS r'),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled']);
    expect(await counts()).toEqual([
      { id: 1, n: 2 },
      { id: 2, n: 2 },
    ]);
    // Opposite orders with both first updates done before either second one: always a deadlock,
    // which PostgreSQL breaks after deadlock_timeout by failing one of the two.
  });

  it.runIf(isPostgres)('sends a marked statement as a prepared one', async () => {
    const sql = prepared('SELECT write_two($1, $1, 0) AS r');
    expect(await database.db.write(sql, [1])).toEqual([{ r: 1 }]);
    // Every pooled connection that ran it holds it; ask until one that did answers.
    const seen = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const rows = await database.db.write<{ name: string }>(
        "SELECT name FROM pg_prepared_statements WHERE statement LIKE 'SELECT write_two%'",
      );
      for (const r of rows) seen.add(r.name);
    }
    expect([...seen]).toEqual([preparedName(sql)]);
  });
});
