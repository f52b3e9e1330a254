-- Money in micro-dollars (1 USD = 1,000,000 micros; one atomic unit of USDC is one micro). Until
-- now every stored amount was integer cents, so the x402 rail refused any price that is not a
-- whole number of cents ($0.001, the price most x402 resources ask). Every stored money column
-- `X_cents` becomes `X_micros` (renamed, then multiplied by 10,000; defaults scaled; the CHECKs
-- only compare with zero and follow the column). Renamed rather than reused: an instance of the
-- previous version fails loudly on every money path instead of writing cents into a micros column,
-- which is why this is a stop-the-world upgrade (docs/deploy.md, "Migration 0050").
--
-- The ledger is history and its rows are never changed (trigger ledger_entries_append_only): the
-- one exception is this migration's one UPDATE, which scales every entry alike (so every ledger
-- transaction still sums to zero) with the trigger disabled for that statement only.

ALTER TABLE ledger_entries RENAME COLUMN amount_cents TO amount_micros;
ALTER TABLE ledger_entries DISABLE TRIGGER ledger_entries_append_only;
UPDATE ledger_entries SET amount_micros = amount_micros * 10000;
ALTER TABLE ledger_entries ENABLE TRIGGER ledger_entries_append_only;

ALTER TABLE wallets RENAME COLUMN available_cents TO available_micros;
ALTER TABLE wallets RENAME COLUMN held_cents TO held_micros;
ALTER TABLE wallets RENAME COLUMN decoy_spent_cents TO decoy_spent_micros;
ALTER TABLE wallets RENAME COLUMN decoy_held_cents TO decoy_held_micros;
UPDATE wallets SET available_micros = available_micros * 10000, held_micros = held_micros * 10000,
  decoy_spent_micros = decoy_spent_micros * 10000, decoy_held_micros = decoy_held_micros * 10000;

ALTER TABLE x402_wallets RENAME COLUMN available_cents TO available_micros;
ALTER TABLE x402_wallets RENAME COLUMN held_cents TO held_micros;
ALTER TABLE x402_wallets RENAME COLUMN authorized_cents TO authorized_micros;
ALTER TABLE x402_wallets RENAME COLUMN per_transaction_cents TO per_transaction_micros;
ALTER TABLE x402_wallets RENAME COLUMN daily_cents TO daily_micros;
ALTER TABLE x402_wallets RENAME COLUMN monthly_cents TO monthly_micros;
ALTER TABLE x402_wallets RENAME COLUMN approval_threshold_cents TO approval_threshold_micros;
UPDATE x402_wallets SET available_micros = available_micros * 10000, held_micros = held_micros * 10000,
  authorized_micros = authorized_micros * 10000, per_transaction_micros = per_transaction_micros * 10000,
  daily_micros = daily_micros * 10000, monthly_micros = monthly_micros * 10000,
  approval_threshold_micros = approval_threshold_micros * 10000;
ALTER TABLE x402_wallets ALTER COLUMN per_transaction_micros SET DEFAULT 1000000,
  ALTER COLUMN daily_micros SET DEFAULT 10000000, ALTER COLUMN monthly_micros SET DEFAULT 50000000,
  ALTER COLUMN approval_threshold_micros SET DEFAULT 500000;

-- x402_payments.amount_micro (numeric, the atomic amount of the requirements) stays beside it.
ALTER TABLE x402_payments RENAME COLUMN amount_cents TO amount_micros;
UPDATE x402_payments SET amount_micros = amount_micros * 10000;

ALTER TABLE owners RENAME COLUMN master_per_transaction_cents TO master_per_transaction_micros;
ALTER TABLE owners RENAME COLUMN master_daily_cents TO master_daily_micros;
ALTER TABLE owners RENAME COLUMN master_monthly_cents TO master_monthly_micros;
UPDATE owners SET master_per_transaction_micros = master_per_transaction_micros * 10000,
  master_daily_micros = master_daily_micros * 10000, master_monthly_micros = master_monthly_micros * 10000;
ALTER TABLE owners ALTER COLUMN master_per_transaction_micros SET DEFAULT 5000000,
  ALTER COLUMN master_daily_micros SET DEFAULT 20000000, ALTER COLUMN master_monthly_micros SET DEFAULT 100000000;

ALTER TABLE cards RENAME COLUMN per_transaction_cents TO per_transaction_micros;
ALTER TABLE cards RENAME COLUMN daily_cents TO daily_micros;
ALTER TABLE cards RENAME COLUMN monthly_cents TO monthly_micros;
ALTER TABLE cards RENAME COLUMN approval_threshold_cents TO approval_threshold_micros;
UPDATE cards SET per_transaction_micros = per_transaction_micros * 10000, daily_micros = daily_micros * 10000,
  monthly_micros = monthly_micros * 10000, approval_threshold_micros = approval_threshold_micros * 10000;
ALTER TABLE cards ALTER COLUMN per_transaction_micros SET DEFAULT 5000000,
  ALTER COLUMN daily_micros SET DEFAULT 10000000, ALTER COLUMN monthly_micros SET DEFAULT 50000000;

ALTER TABLE card_profiles RENAME COLUMN allowance_cents TO allowance_micros;
ALTER TABLE card_profiles RENAME COLUMN approval_threshold_cents TO approval_threshold_micros;
UPDATE card_profiles SET allowance_micros = allowance_micros * 10000,
  approval_threshold_micros = approval_threshold_micros * 10000;
ALTER TABLE card_profiles ALTER COLUMN allowance_micros SET DEFAULT 50000000;

ALTER TABLE checkout_confirmations RENAME COLUMN amount_cents TO amount_micros;
UPDATE checkout_confirmations SET amount_micros = amount_micros * 10000;

ALTER TABLE tasks RENAME COLUMN amount_cents TO amount_micros;
UPDATE tasks SET amount_micros = amount_micros * 10000;

ALTER TABLE topup_requests RENAME COLUMN amount_cents TO amount_micros;
ALTER TABLE topup_requests RENAME COLUMN approved_cents TO approved_micros;
UPDATE topup_requests SET amount_micros = amount_micros * 10000, approved_micros = approved_micros * 10000;

-- The rolling-deploy compatibility pieces scheduled for this migration (docs/deploy.md): the
-- spend_counters view and its update trigger, checkout_add_counter, the checkout_attempt wrapper
-- and the personas' columns. (checkout_run's lookup of card checkouts keyed before 0023 in
-- checkout_idempotency goes with its function file.) The spending windows' figures are renamed
-- after the view that read them is gone.
DROP VIEW spend_counters;
DROP FUNCTION IF EXISTS spend_counters_update();
DROP FUNCTION IF EXISTS checkout_add_counter(text, text, timestamptz, bigint, bigint);
DROP FUNCTION IF EXISTS checkout_attempt(text, text, integer, bigint, text, text, text, text, text, text, timestamptz,
  timestamptz, timestamptz, timestamptz, integer, text, text, text, text, integer, text, text);
ALTER TABLE card_profiles DROP COLUMN persona_delay_ms, DROP COLUMN persona_sigma, DROP COLUMN persona_deny,
  DROP COLUMN persona_expire;

ALTER TABLE spend_windows RENAME COLUMN day_cents TO day_micros;
ALTER TABLE spend_windows RENAME COLUMN week_cents TO week_micros;
ALTER TABLE spend_windows RENAME COLUMN month_cents TO month_micros;
UPDATE spend_windows SET day_micros = day_micros * 10000, week_micros = week_micros * 10000,
  month_micros = month_micros * 10000;

-- checkout_run's last parameter is renamed (p_low_balance_micros), which CREATE OR REPLACE cannot
-- do: dropped here, its function file defines it again after the migrations. (IF EXISTS: on a new
-- database the function files, where these functions are defined, run after every migration.)
DROP FUNCTION IF EXISTS checkout_run(text, text, integer, bigint, text, text, text, text, text, text, timestamptz,
  timestamptz, timestamptz, timestamptz, integer, text, text, text, text, integer, text, text, bigint);

-- The constraints keep their meaning (they compare with zero); their names follow the columns.
DO $$
DECLARE c record;
BEGIN
  FOR c IN SELECT conrelid::regclass AS rel, conname FROM pg_constraint
            WHERE connamespace = current_schema()::regnamespace AND conname LIKE '%\_cents\_%'
  LOOP
    EXECUTE format('ALTER TABLE %s RENAME CONSTRAINT %I TO %I', c.rel, c.conname,
                   replace(c.conname, '_cents_', '_micros_'));
  END LOOP;
  -- The dropped functions' files are gone too.
  IF to_regclass('schema_functions') IS NOT NULL THEN
    DELETE FROM schema_functions WHERE name IN ('spend_counters_update', 'checkout_add_counter', 'checkout_attempt');
  END IF;
END $$;
