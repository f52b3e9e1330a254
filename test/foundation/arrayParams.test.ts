import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { arrayLiteral } from '../../src/platform/db/postgres.ts';
import { createTestDatabase, isPostgres, type TestDatabase } from '../support/db.ts';

// Array parameters: the PostgreSQL driver writes flat arrays of strings, numbers, booleans and
// nulls as literals itself (arrayLiteral, one pass) instead of leaving them to pg. The literal is
// pg's, character for character, and every value comes back as it was sent. (PostgreSQL only: the
// embedded driver serialises parameters its own way.)
const pgUtils = createRequire(import.meta.url)('pg/lib/utils.js') as {
  prepareValue(value: unknown): unknown;
};

const tricky = [
  'plain',
  '',
  'NULL',
  'null',
  ' spaced ',
  'a,b',
  '{braces}',
  'quote " inside',
  'back \\ slash',
  '\\"both\\"',
  'ünïcödé ✓',
  'line\nbreak\ttab',
];

describe('array parameters', () => {
  it('are written as pg writes them', () => {
    const cases: unknown[][] = [
      [],
      tricky,
      [...tricky, null, undefined],
      [1, 0, -3, 2.5, 1e21, Number.NaN],
      [true, false, null],
      [200, null, 'x', false],
      [10n, 20n],
    ];
    for (const values of cases) expect(arrayLiteral(values)).toBe(pgUtils.prepareValue(values));
  });

  it('leaves other arrays to pg', () => {
    expect(arrayLiteral([['nested']])).toBeUndefined();
    expect(arrayLiteral([new Date(0)])).toBeUndefined();
    expect(arrayLiteral([Buffer.from('x')])).toBeUndefined();
    expect(arrayLiteral([{ a: 1 }])).toBeUndefined();
  });

  describe.runIf(isPostgres)('through the PostgreSQL driver', () => {
    let database: TestDatabase;
    beforeAll(async () => {
      database = await createTestDatabase();
    });
    afterAll(async () => {
      await database.drop();
    });

    it('come back as sent', async () => {
      const values = [...tricky, null];
      const [row] = await database.db.query<{ t: (string | null)[]; i: number[]; b: boolean[] }>(
        'SELECT $1::text[] AS t, $2::int[] AS i, $3::boolean[] AS b',
        [values, [1, -2, 3], [true, false]],
      );
      expect(row).toEqual({ t: values, i: [1, -2, 3], b: [true, false] });
      // In a transaction and through a statement that may write (autocommit) too.
      const [inTx] = await database.db.transaction((tx) =>
        tx.query<{ t: (string | null)[] }>('SELECT $1::text[] AS t', [values]),
      );
      expect(inTx!.t).toEqual(values);
      const [written] = await database.db.write<{ t: (string | null)[] }>('SELECT $1::text[] AS t', [values]);
      expect(written!.t).toEqual(values);
    });
  });
});
