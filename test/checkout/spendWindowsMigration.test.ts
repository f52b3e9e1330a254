import { describe, expect, it } from 'vitest';
import { migrate } from '../../src/platform/db/migrate.ts';
import { createTestDatabase } from '../support/db.ts';

// Migration 0026 moved the spending counters from one spend_counters row per scope and window to one
// spend_windows row per scope. Its data step is tested here from the state a database had before it:
// the migrated test database is put back (spend_counters as 0001 made it, 0026 unrecorded) and
// migrated again, as an upgraded deployment is. The rest of that database is at 0050 (money in
// micros, 0027's view gone): after 0026's data step the test renames the figures as 0050 did.

const at = (iso: string) => new Date(`${iso}T00:00:00Z`);

describe('migration 0026: spending counters to one row per scope', () => {
  it('keeps the newest window of each kind per scope, then counts on from it', async () => {
    const { db, drop } = await createTestDatabase();
    try {
      await db.transaction(async (tx) => {
        await tx.exec(`DROP TABLE spend_windows;
          CREATE TABLE spend_counters (
            scope text NOT NULL,
            window_kind text NOT NULL CHECK (window_kind IN ('day', 'week', 'month')),
            window_start timestamptz NOT NULL,
            spent_cents bigint NOT NULL DEFAULT 0 CHECK (spent_cents >= 0),
            PRIMARY KEY (scope, window_kind, window_start));
          DELETE FROM schema_migrations WHERE version IN (26, 27);`);
        const rows: Array<[string, string, string, number]> = [
          ['card:c1', 'day', '2026-11-23', 300],
          ['card:c1', 'day', '2026-11-24', 500],
          ['card:c1', 'month', '2026-11-01', 800],
          ['bot:b1', 'month', '2026-10-01', 1000],
          ['bot:b1', 'month', '2026-11-01', 200],
          ['owner:o1', 'week', '2026-11-23', 700],
          ['owner:o1:decoy', 'day', '2026-11-24', 0],
        ];
        for (const [scope, kind, start, cents] of rows) {
          await tx.query(
            'INSERT INTO spend_counters (scope, window_kind, window_start, spent_cents) VALUES ($1, $2, $3, $4)',
            [scope, kind, at(start), cents],
          );
        }
      });

      expect(await migrate(db)).toEqual([26, 27]);

      const windows = await db.query<Record<string, unknown>>(
        `SELECT scope, day_start, day_cents::int, week_start, week_cents::int, month_start, month_cents::int
           FROM spend_windows ORDER BY scope`,
      );
      expect(windows).toEqual([
        {
          scope: 'bot:b1',
          day_start: null,
          day_cents: 0,
          week_start: null,
          week_cents: 0,
          month_start: at('2026-11-01'),
          month_cents: 200,
        },
        {
          scope: 'card:c1',
          day_start: at('2026-11-24'),
          day_cents: 500,
          week_start: null,
          week_cents: 0,
          month_start: at('2026-11-01'),
          month_cents: 800,
        },
        {
          scope: 'owner:o1',
          day_start: null,
          day_cents: 0,
          week_start: at('2026-11-23'),
          week_cents: 700,
          month_start: null,
          month_cents: 0,
        },
        {
          scope: 'owner:o1:decoy',
          day_start: at('2026-11-24'),
          day_cents: 0,
          week_start: null,
          week_cents: 0,
          month_start: null,
          month_cents: 0,
        },
      ]);
      // spend_counters is now the view of 0027 (for the previous version's instances), not a table.
      const kind = await db.query<{ relkind: string }>(
        `SELECT relkind::text FROM pg_class WHERE oid = to_regclass('spend_counters')`,
      );
      expect(kind).toEqual([{ relkind: 'v' }]);

      // 0050's rename of the figures (its ×10,000 left out: the figures stay as small numbers here).
      await db.exec(`DROP VIEW spend_counters; DROP FUNCTION spend_counters_update();
        ALTER TABLE spend_windows RENAME COLUMN day_cents TO day_micros;
        ALTER TABLE spend_windows RENAME COLUMN week_cents TO week_micros;
        ALTER TABLE spend_windows RENAME COLUMN month_cents TO month_micros;`);

      // The function files came with it: a purchase on the same day adds to the moved figures, and
      // a limit counts what was moved (500 + 600 passes a 1,000 day limit).
      const add = (amount: number) =>
        db.query<{ refused: string | null; spent: number | null }>(
          'SELECT refused, spent FROM spend_add($1, $2, $3, $4, NULL, NULL, $5, $6)',
          ['card:c1', amount, at('2026-11-24'), 1000, at('2026-11-01'), 5000],
        );
      expect((await add(600))[0]).toEqual({ refused: 'day', spent: 500 });
      expect((await add(100))[0]!.refused).toBeNull();
      const card = await db.query<{ day_micros: number; month_micros: number }>(
        `SELECT day_micros::int, month_micros::int FROM spend_windows WHERE scope = 'card:c1'`,
      );
      expect(card[0]).toEqual({ day_micros: 600, month_micros: 900 });
    } finally {
      await drop();
    }
  });
});
