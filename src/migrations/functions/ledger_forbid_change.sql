-- Ledger rows are history: never changed, never deleted. Trigger ledger_entries_append_only
-- (BEFORE UPDATE OR DELETE ON ledger_entries, migration 0001) raises on any change; the data
-- retention job lists no ledger table (src/jobs/retention.ts). Defined first in migration 0001;
-- this file is its one definition since 0033.
CREATE OR REPLACE FUNCTION ledger_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger rows are append-only';
END $$;
