import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { loadFunctions, loadMigrations, migrate } from '../../src/platform/db/migrate.ts';
import type { Db } from '../../src/platform/db/port.ts';
import { createEmptyDatabase } from '../support/db.ts';

// Migration 0059 (a profile's allowance in its card row), run on a database as the previous version
// left it: the migrations up to 0058 with that version's spend_run (a copy in
// fixtures/functions-0058), which counted each allowance in a row of its own
// ('profile:<card>:<index>'), filled through that spend_run. Then 0059 and this version's
// spend_run: the weekly figures are in the card rows, the allowance rows are gone, and the
// allowances hold at exactly the figures the previous version had counted.

const NOW = new Date('2026-11-25T10:00:00Z'); // a Wednesday
const DAY = new Date('2026-11-25T00:00:00Z');
const WEEK = new Date('2026-11-23T00:00:00Z');
const MONTH = new Date('2026-11-01T00:00:00Z');
const USD = 1_000_000;

/** One purchase through spend_run (whichever version the database has); its answer or refusal. */
async function buy(db: Db, id: string, profile: number, micros: number): Promise<Record<string, unknown>> {
  try {
    const [row] = await db.query<{ r: Record<string, unknown> }>(
      `SELECT spend_run(p_method => 'card', p_bot_id => 'bot_a', p_card_id => NULL, p_profile_index => $2,
         p_amount => $3, p_category => NULL, p_id => $1, p_merchant_name => 'M', p_merchant_url => 'https://m.example',
         p_item_name => 'I', p_task_id => NULL, p_now => $4, p_day => $5, p_week => $6, p_month => $7,
         p_window_seconds => 900, p_ledger_id => 'ltx_' || $1, p_event_id => 'evt_' || $1, p_event_body => '{}',
         p_rate_key => 'checkout:bot_a', p_rate_limit => 100, p_idempotency_key => NULL, p_request_hash => NULL,
         p_low_balance_micros => NULL) AS r`,
      [id, profile, micros, NOW, DAY, WEEK, MONTH],
    );
    return row!.r;
  } catch (error) {
    return JSON.parse((error as Error).message) as Record<string, unknown>;
  }
}

async function windows(db: Db): Promise<Record<string, string>> {
  const rows = await db.query<{ scope: string; v: string }>(
    `SELECT scope, concat_ws(' ', 'day', (day_start IS NOT NULL)::text, day_micros, 'week', (week_start IS NOT NULL)::text, week_micros,
                             'month', (month_start IS NOT NULL)::text, month_micros) AS v
       FROM spend_windows WHERE scope NOT LIKE 'owner:%' AND scope NOT LIKE 'bot:%' ORDER BY scope`,
  );
  return Object.fromEntries(rows.map((r) => [r.scope, r.v]));
}

describe('migration 0059: a profile’s allowance counts in its card row', () => {
  it('moves the weekly figures of a database filled by the previous version, and the allowances hold at them', async () => {
    const { db, drop } = await createEmptyDatabase();
    try {
      const all = await loadMigrations();
      expect(all.map((m) => m.version)).toContain(59);
      const previousSpendRun = await readFile(
        new URL('./fixtures/functions-0058/spend_run.sql', import.meta.url),
        'utf8',
      );
      // It added each scope with spend_add (gone since 0061: a copy beside it).
      const previousSpendAdd = await readFile(
        new URL('./fixtures/functions-0058/spend_add.sql', import.meta.url),
        'utf8',
      );
      // Its rate limiter, before 0062 gave bucket rows a running total.
      const previousRateLimit = await readFile(
        new URL('./fixtures/functions-0061/rate_limit_consume.sql', import.meta.url),
        'utf8',
      );
      const previousFunctions = [
        ...(await loadFunctions()).map((f) =>
          f.name === 'spend_run'
            ? { ...f, sql: previousSpendRun, checksum: 'previous' }
            : f.name === 'rate_limit_consume'
              ? { ...f, sql: previousRateLimit, checksum: 'previous' }
              : f,
        ),
        { name: 'spend_add', sql: previousSpendAdd, checksum: 'previous' },
      ];
      await migrate(
        db,
        all.filter((m) => m.version <= 58),
        previousFunctions,
      );

      // An owner with wide master budgets, a funded bot, a card whose real profile is 1, with
      // wide card limits: profiles 1 (real) and 2 (a decoy) with weekly allowances of $50 (the
      // default), profile 3 (a decoy) with a daily one of $10.
      await db.exec(`
        INSERT INTO owners (id, email, email_normalized, created_at, master_per_transaction_micros,
            master_daily_micros, master_monthly_micros)
          VALUES ('own_a', 'a@x.test', 'a@x.test', now(), 1000000000, 10000000000, 100000000000);
        INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
            webhook_secret_enc, webhook_status, created_at, owner_id)
          VALUES ('bot_a', 'A', 'a@x.test', 'a@x.test', 'custom', 'h', 'p', 'e', 'active', now(), 'own_a');
        INSERT INTO wallets (bot_id, status, updated_at) VALUES ('bot_a', 'active', now());
        INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at)
          VALUES ('ltx_fund', 'bot_a', 'funding', 'f1', 'Owner funding', now());
        INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_micros, created_at) VALUES
          ('ltx_fund', 'bot_a', 'owner_funding', -1000000000, now()), ('ltx_fund', 'bot_a', 'wallet_available', 1000000000, now());
        INSERT INTO cards (id, bot_id, status, real_profile_index, missing_position, created_at, approval_mode,
            approval_threshold_micros, per_transaction_micros, daily_micros, monthly_micros)
          VALUES ('card_a', 'bot_a', 'active', 1, 0, now(), 'auto_approve_under_threshold', 1000000000,
                  1000000000, 1000000000, 1000000000);
        INSERT INTO card_profiles (card_id, profile_index, updated_at) SELECT 'card_a', i, now() FROM generate_series(1, 3) i;
        UPDATE card_profiles SET allowance_window = 'day', allowance_micros = 10000000 WHERE profile_index = 3;`);
      for (const [id, profile, usd] of [
        ['chk_1', 1, 20],
        ['chk_2', 1, 15],
        ['chk_3', 2, 30],
        ['chk_4', 3, 6],
      ] as const) {
        expect(await buy(db, id, profile, usd * USD), id).toMatchObject({ ok: true });
      }
      // As the previous version counted them: each allowance in a row of its own.
      expect(await windows(db)).toEqual({
        'card:card_a': `day true ${35 * USD} week false 0 month true ${35 * USD}`,
        'card:card_a:p2': `day true ${30 * USD} week false 0 month true ${30 * USD}`,
        'card:card_a:p3': `day true ${6 * USD} week false 0 month true ${6 * USD}`,
        'profile:card_a:1': `day false 0 week true ${35 * USD} month false 0`,
        'profile:card_a:2': `day false 0 week true ${30 * USD} month false 0`,
        'profile:card_a:3': `day true ${6 * USD} week false 0 month false 0`,
      });

      expect(await migrate(db)).toEqual(all.filter((m) => m.version > 58).map((m) => m.version));
      expect(await windows(db)).toEqual({
        'card:card_a': `day true ${35 * USD} week true ${35 * USD} month true ${35 * USD}`,
        'card:card_a:p2': `day true ${30 * USD} week true ${30 * USD} month true ${30 * USD}`,
        'card:card_a:p3': `day true ${6 * USD} week false 0 month true ${6 * USD}`,
      });
      const [week] = await db.query<{ start: Date }>(
        "SELECT week_start AS start FROM spend_windows WHERE scope = 'card:card_a'",
      );
      expect(new Date(week!.start).getTime()).toBe(WEEK.getTime());

      // The allowances hold at the carried figures: up to exactly the limit, not a micro-dollar more.
      expect(await buy(db, 'chk_5', 1, 15 * USD)).toMatchObject({ ok: true, is_real: true });
      expect(await buy(db, 'chk_6', 1, 1)).toEqual({
        error: 'limit',
        name: 'profile_allowance',
        window: 'week',
        limit_micros: 50 * USD,
        spent_micros: 50 * USD,
      });
      expect(await buy(db, 'chk_7', 2, 20 * USD + 1)).toMatchObject({
        name: 'profile_allowance',
        spent_micros: 30 * USD,
      });
      expect(await buy(db, 'chk_8', 2, 20 * USD)).toMatchObject({ ok: true, is_real: false });
      expect(await buy(db, 'chk_9', 3, 4 * USD)).toMatchObject({ ok: true });
      expect(await buy(db, 'chk_10', 3, 1)).toEqual({
        error: 'limit',
        name: 'profile_allowance',
        window: 'day',
        limit_micros: 10 * USD,
        spent_micros: 10 * USD,
      });
      expect(Object.keys(await windows(db))).toEqual(['card:card_a', 'card:card_a:p2', 'card:card_a:p3']);
    } finally {
      await drop();
    }
  }, 120_000);
});
