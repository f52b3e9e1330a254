import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadFunctions, loadMigrations, migrate } from '../../src/platform/db/migrate.ts';
import type { Db } from '../../src/platform/db/port.ts';
import { createEmptyDatabase } from '../support/db.ts';

// Migration 0050 (money in micro-dollars), run on a database as the previous version left it: the
// migrations up to 0045 with that version's function files (a copy in fixtures/functions-0045),
// filled through that version's own database functions (checkout_run in cents for card purchases,
// the ledger trigger for fundings and x402 movements, spend_add for x402 counters). Then 0050 and
// this version's function files: every amount is ×10,000, the ledger still balances, and the
// ledger is append-only again.

const OLD_FUNCTIONS = fileURLToPath(new URL('./fixtures/functions-0045/', import.meta.url));
const NOW = new Date('2026-11-24T10:00:00Z');
const DAY = new Date('2026-11-24T00:00:00Z');
const WEEK = new Date('2026-11-23T00:00:00Z');
const MONTH = new Date('2026-11-01T00:00:00Z');

/** Every stored amount, by table, key and column, as numbers. */
async function amounts(db: Db, suffix: 'cents' | 'micros'): Promise<Record<string, number>> {
  const tables: Array<[string, string, string[]]> = [
    ['owners', 'id', ['master_per_transaction', 'master_daily', 'master_monthly']],
    ['wallets', 'bot_id', ['available', 'held', 'decoy_spent', 'decoy_held']],
    [
      'x402_wallets',
      'bot_id',
      ['available', 'held', 'authorized', 'per_transaction', 'daily', 'monthly', 'approval_threshold'],
    ],
    ['cards', 'id', ['per_transaction', 'daily', 'monthly', 'approval_threshold']],
    ['card_profiles', "card_id || ':' || profile_index", ['allowance', 'approval_threshold']],
    ['checkout_confirmations', 'id', ['amount']],
    ['x402_payments', 'id', ['amount']],
    ['tasks', 'id', ['amount']],
    ['topup_requests', 'id', ['amount', 'approved']],
    ['spend_windows', 'scope', ['day', 'week', 'month']],
  ];
  const out: Record<string, number> = {};
  for (const [table, key, columns] of tables) {
    const select = columns.map((c) => `${c}_${suffix}::text AS ${c}`).join(', ');
    const rows = await db.query<Record<string, string | null>>(
      `SELECT ${key} AS k, ${select} FROM ${table} ORDER BY 1`,
    );
    for (const r of rows) {
      for (const c of columns) {
        if (r[c] !== null && r[c] !== undefined) out[`${table}/${r.k}/${c}`] = Number(r[c]);
      }
    }
  }
  const ledger = await db.query<{ k: string; s: string }>(
    `SELECT bot_id || '/' || account AS k, sum(amount_${suffix})::text AS s FROM ledger_entries GROUP BY 1 ORDER BY 1`,
  );
  for (const r of ledger) out[`ledger/${r.k}`] = Number(r.s);
  return out;
}

describe('migration 0050: money in micro-dollars', () => {
  it('scales every amount of a database filled by the previous version ×10,000, keeps the ledger balanced and append-only', async () => {
    const { db, drop } = await createEmptyDatabase();
    try {
      const all = await loadMigrations();
      expect(all.map((m) => m.version)).toContain(50);
      const previous = all.filter((m) => m.version <= 45);
      await migrate(db, previous, await loadFunctions(OLD_FUNCTIONS));

      // The previous version's data: an owner with a bot, a card and a partner wallet.
      await db.exec(`
        INSERT INTO owners (id, email, email_normalized, created_at) VALUES ('own_a', 'a@x.test', 'a@x.test', now());
        INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
            webhook_secret_enc, webhook_status, created_at, owner_id)
          VALUES ('bot_a', 'A', 'a@x.test', 'a@x.test', 'custom', 'h', 'p', 'e', 'active', now(), 'own_a');
        INSERT INTO wallets (bot_id, status, updated_at) VALUES ('bot_a', 'active', now());
        INSERT INTO cards (id, bot_id, status, real_profile_index, missing_position, created_at, approval_mode,
            approval_threshold_cents)
          VALUES ('card_a', 'bot_a', 'active', 1, 0, now(), 'auto_approve_under_threshold', 300);
        INSERT INTO card_profiles (card_id, profile_index, updated_at, allowance_window)
          SELECT 'card_a', i, now(), 'month' FROM generate_series(1, 6) i;
        INSERT INTO x402_wallets (bot_id, network, asset, address, key_enc, key_source, created_at, updated_at)
          VALUES ('bot_a', 'eip155:31337', '0x0000000000000000000000000000000000000001',
                  '0x0000000000000000000000000000000000000002', 'k', 'generated', now(), now());
        INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at) VALUES
          ('ltx_fund', 'bot_a', 'funding', 'f1', 'Owner funding', now()),
          ('ltx_dep', 'bot_a', 'x402_deposit', 'd1', 'USDC received', now()),
          ('ltx_pay', 'bot_a', 'x402_payment', 'x402_a', 'x402 payment authorised', now());
        INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_cents, created_at) VALUES
          ('ltx_fund', 'bot_a', 'owner_funding', -5000, now()), ('ltx_fund', 'bot_a', 'wallet_available', 5000, now());
        INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_cents, created_at) VALUES
          ('ltx_dep', 'bot_a', 'x402_deposits', -300, now()), ('ltx_dep', 'bot_a', 'x402_available', 300, now());
        INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_cents, created_at) VALUES
          ('ltx_pay', 'bot_a', 'x402_available', -3, now()), ('ltx_pay', 'bot_a', 'x402_authorized', 3, now());
        INSERT INTO x402_payments (id, bot_id, owner_id, resource_url, resource_domain, network, asset, pay_from,
            pay_to, amount_micro, amount_cents, requirements, status, created_at)
          VALUES ('x402_a', 'bot_a', 'own_a', 'https://api.example/a', 'api.example', 'eip155:31337',
                  '0x0000000000000000000000000000000000000001', '0x0000000000000000000000000000000000000002',
                  '0x0000000000000000000000000000000000000003', 30000, 3, '{}', 'authorized', now());
        INSERT INTO topup_requests (id, bot_id, owner_id, amount_cents, approved_cents, reason, status, created_at, expires_at)
          VALUES ('topup_a', 'bot_a', 'own_a', 700, 600, 'more', 'approved', now(), now() + interval '1 day');
        INSERT INTO tasks (id, bot_id, card_id, is_decoy, due_at, profile_index, merchant_name, merchant_url, item_name,
            amount_cents, category, status, created_at)
          VALUES ('task_a', 'bot_a', 'card_a', false, now(), 1, 'M', 'https://m.example', 'I', 450, 'retail', 'available', now());`);
      // x402 counters as the previous version added them.
      for (const scope of ['x402:bot_a', 'owner:own_a', 'bot:bot_a']) {
        await db.query('SELECT * FROM spend_add($1, 3, $2, NULL, NULL, NULL, $3, NULL)', [scope, DAY, MONTH]);
      }
      // Card purchases through the previous version's checkout_run: one approved, one held.
      const run = (id: string, cents: number) =>
        db.query(
          `SELECT checkout_run(p_bot_id => 'bot_a', p_card_id => NULL, p_profile_index => 1, p_amount => $2,
             p_category => NULL, p_id => $1, p_merchant_name => 'M', p_merchant_url => 'https://m.example',
             p_item_name => 'I', p_task_id => NULL, p_now => $3, p_day => $4, p_week => $5, p_month => $6,
             p_window_seconds => 900, p_ledger_id => 'ltx_' || $1, p_event_id => 'evt_' || $1, p_event_body => '{}',
             p_rate_key => 'checkout:bot_a', p_rate_limit => 100, p_idempotency_key => NULL, p_request_hash => NULL,
             p_low_balance_cents => NULL) AS r`,
          [id, cents, NOW, DAY, WEEK, MONTH],
        );
      await run('chk_approved', 250);
      await run('chk_held', 450);
      const before = await amounts(db, 'cents');
      // The data is what it should be before the migration.
      expect(before).toMatchObject({
        'wallets/bot_a/available': 5000 - 250 - 450,
        'wallets/bot_a/held': 450,
        'x402_wallets/bot_a/available': 297,
        'x402_wallets/bot_a/authorized': 3,
        'checkout_confirmations/chk_approved/amount': 250,
        'checkout_confirmations/chk_held/amount': 450,
        'spend_windows/owner:own_a/day': 250 + 450 + 3,
        'spend_windows/card:card_a/month': 700,
        'owners/own_a/master_daily': 2000,
        'ledger/bot_a/merchant_settlement': 250,
      });

      // This version's migrations after 0045: 0046 (the webhook queue), 0050 and later.
      expect(await migrate(db)).toEqual(all.filter((m) => m.version > 45).map((m) => m.version));

      const after = await amounts(db, 'micros');
      // Migration 0059 (after this one) folds the profiles' allowance rows into their card rows:
      // this profile's monthly allowance reads the card row's month from then on.
      const allowanceRow = (k: string) => k.startsWith('spend_windows/profile:');
      expect(Object.keys(after).sort()).toEqual(
        Object.keys(before)
          .filter((k) => !allowanceRow(k))
          .sort(),
      );
      for (const [k, v] of Object.entries(before)) if (!allowanceRow(k)) expect(after[k], k).toBe(v * 10_000);
      expect(before['spend_windows/profile:card_a:1/month']).toBe(before['spend_windows/card:card_a/month']);
      // Every ledger transaction still sums to zero, and the projections equal the ledger.
      const unbalanced = await db.query(
        'SELECT transaction_id FROM ledger_entries GROUP BY transaction_id HAVING sum(amount_micros) <> 0',
      );
      expect(unbalanced).toEqual([]);
      expect(after['wallets/bot_a/available']).toBe(after['ledger/bot_a/wallet_available']);
      expect(after['x402_wallets/bot_a/authorized']).toBe(after['ledger/bot_a/x402_authorized']);
      // New rows take the scaled defaults ($5 per purchase, $20 a day, $100 a month for an owner).
      await db.exec(
        "INSERT INTO owners (id, email, email_normalized, created_at) VALUES ('own_b', 'b@x.test', 'b@x.test', now())",
      );
      const [fresh] = await db.query<Record<string, number>>(
        `SELECT master_per_transaction_micros AS tx, master_daily_micros AS day, master_monthly_micros AS month
           FROM owners WHERE id = 'own_b'`,
      );
      expect(fresh).toEqual({ tx: 5_000_000, day: 20_000_000, month: 100_000_000 });
      // The ledger is append-only again.
      await expect(db.query('UPDATE ledger_entries SET amount_micros = amount_micros * 2')).rejects.toThrow(
        /append-only/,
      );
      await expect(db.query("DELETE FROM ledger_entries WHERE transaction_id = 'ltx_fund'")).rejects.toThrow(
        /append-only/,
      );
      // The compatibility pieces are gone; no column is named in cents any more.
      const gone = await db.query<{ name: string }>(
        `SELECT proname AS name FROM pg_proc WHERE pronamespace = current_schema()::regnamespace
            AND proname IN ('checkout_attempt', 'checkout_add_counter', 'spend_counters_update')
         UNION ALL SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace
            AND relname = 'spend_counters'
         UNION ALL SELECT table_name || '.' || column_name FROM information_schema.columns
          WHERE table_schema = current_schema() AND (column_name LIKE '%\\_cents' OR column_name LIKE 'persona\\_%')`,
      );
      expect(gone).toEqual([]);
      // The new chain (spend_run, the one chain of both rails) counts micros on the migrated
      // figures: $0.000001 more for the owner.
      await db.query(
        `SELECT spend_run(p_method => 'card', p_bot_id => 'bot_a', p_card_id => NULL, p_profile_index => 1, p_amount => 1,
           p_category => NULL, p_id => 'chk_micro', p_merchant_name => 'M', p_merchant_url => 'https://m.example',
           p_item_name => 'I', p_task_id => NULL, p_now => $1, p_day => $2, p_week => $3, p_month => $4,
           p_window_seconds => 900, p_ledger_id => 'ltx_micro', p_event_id => 'evt_micro', p_event_body => '{}',
           p_rate_key => 'checkout:bot_a', p_rate_limit => 100, p_idempotency_key => NULL, p_request_hash => NULL,
           p_low_balance_micros => NULL)`,
        [NOW, DAY, WEEK, MONTH],
      );
      const [owner] = await db.query<{ day: string }>(
        "SELECT day_micros::text AS day FROM spend_windows WHERE scope = 'owner:own_a'",
      );
      expect(Number(owner?.day)).toBe((250 + 450 + 3) * 10_000 + 1);
    } finally {
      await drop();
    }
  }, 120_000);
});
