import { describe, expect, it } from 'vitest';
import { migrate } from '../../src/platform/db/migrate.ts';
import { createTestDatabase } from '../support/db.ts';

// Migration 0026 moved the spending counters from one spend_counters row per scope and window to one
// spend_windows row per scope. Its data step is tested here from the state a database had before it:
// the migrated test database is put back (spend_counters as 0001 made it, 0026 unrecorded) and
// migrated again, as an upgraded deployment is. How a purchase counts on from the moved rows is
// spend_run's (test/spend/bothRails.test.ts); these rows are the ones it reads.

const at = (iso: string) => new Date(`${iso}T00:00:00Z`);

describe('migration 0026: spending counters to one row per scope', () => {
  it('keeps the newest window of each kind per scope', async () => {
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
    } finally {
      await drop();
    }
  });
});
