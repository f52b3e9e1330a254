import { describe, expect, it } from 'vitest';
import { migrate } from '../../src/platform/db/migrate.ts';
import { createTestDatabase } from '../support/db.ts';

// Migration 0026 moved the spending counters from one spend_counters row per scope and window to one
// spend_windows row per scope. Its data step is tested here from the state a database had before it:
// the migrated test database is put back (spend_counters as 0001 made it, 0026 unrecorded) and
// migrated again, as an upgraded deployment is.

const at = (iso: string) => new Date(`${iso}T00:00:00Z`);

describe('migration 0026: spending counters to one row per scope', () => {
  it('keeps the newest window of each kind per scope, then counts on from it', async () => {
    const { db, drop } = await createTestDatabase();
    try {
      await db.transaction(async (tx) => {
        await tx.exec(`DROP VIEW spend_counters;
          DROP FUNCTION spend_counters_update();
          DROP TABLE spend_windows;
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

      // The function files came with it: a purchase on the same day adds to the moved figures, and
      // a limit counts what was moved (500 + 600 passes a 1,000 day limit).
      const add = (amount: number) =>
        db.query<{ refused: string | null; spent: number | null }>(
          'SELECT refused, spent FROM spend_add($1, $2, $3, $4, NULL, NULL, $5, $6)',
          ['card:c1', amount, at('2026-11-24'), 1000, at('2026-11-01'), 5000],
        );
      expect((await add(600))[0]).toEqual({ refused: 'day', spent: 500 });
      expect((await add(100))[0]!.refused).toBeNull();
      const card = await db.query<{ day_cents: number; month_cents: number }>(
        `SELECT day_cents::int, month_cents::int FROM spend_windows WHERE scope = 'card:c1'`,
      );
      expect(card[0]).toEqual({ day_cents: 600, month_cents: 900 });
    } finally {
      await drop();
    }
  });

  // Instances of the version before 0026 keep running during a rolling deploy (0027): their reads of
  // spend_counters, their release (an UPDATE of it) and their x402 counter call still work, on the
  // figures this version keeps. The statements below are theirs, verbatim.
  it('the previous version’s counter statements work on the new table', async () => {
    const { db, drop } = await createTestDatabase();
    try {
      await db.query(
        `INSERT INTO spend_windows (scope, day_start, day_cents, month_start, month_cents)
         VALUES ('owner:o2', $1, 400, $2, 900), ('bot:b2', NULL, 0, $2, 300)`,
        [at('2026-11-24'), at('2026-11-01')],
      );
      // Bot status and owner budget figures.
      const read = (scope: string, kind: string, start: string) =>
        db.query<{ spent_cents: number }>(
          `SELECT coalesce((SELECT spent_cents FROM spend_counters
                  WHERE scope = $1 AND window_kind = $2 AND window_start = $3), 0)::int AS spent_cents`,
          [scope, kind, at(start)],
        );
      expect((await read('bot:b2', 'month', '2026-11-01'))[0]!.spent_cents).toBe(300);
      expect((await read('owner:o2', 'day', '2026-11-24'))[0]!.spent_cents).toBe(400);
      expect((await read('owner:o2', 'day', '2026-11-23'))[0]!.spent_cents).toBe(0);

      // A released hold, in the window it was taken in; one taken in a window that has rolled over
      // since subtracts nothing.
      const release = (kind: string, start: string, cents: number) =>
        db.query(
          `UPDATE spend_counters SET spent_cents = greatest(spent_cents - $4::bigint, 0)
            WHERE scope = $1 AND window_kind = $2 AND window_start = $3`,
          ['owner:o2', kind, at(start), cents],
        );
      await release('day', '2026-11-24', 150);
      await release('month', '2026-11-01', 150);
      await release('day', '2026-11-23', 150);
      const owner = await db.query<{ day_cents: number; month_cents: number }>(
        `SELECT day_cents::int, month_cents::int FROM spend_windows WHERE scope = 'owner:o2'`,
      );
      expect(owner[0]).toEqual({ day_cents: 250, month_cents: 750 });

      // An x402 payment's counter: -1 when added, else what is spent (nothing added).
      const addCounter = (amount: number, limit: number | null) =>
        db.query<{ r: number }>(`SELECT checkout_add_counter($1, 'month', $2, $3, $4)::int AS r`, [
          'bot:b2',
          at('2026-11-01'),
          amount,
          limit,
        ]);
      expect((await addCounter(500, 1000))[0]!.r).toBe(-1);
      expect((await addCounter(300, 1000))[0]!.r).toBe(800);
      expect((await addCounter(300, null))[0]!.r).toBe(-1);
      expect((await read('bot:b2', 'month', '2026-11-01'))[0]!.spent_cents).toBe(1100);
    } finally {
      await drop();
    }
  });
});
