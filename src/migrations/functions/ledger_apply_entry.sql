-- The wallet projections kept in step with the ledger: the statement trigger ledger_entries_apply
-- (migration 0026; a row trigger before it) runs this once per INSERT into ledger_entries, in the
-- entries' transaction, so the wallets CHECKs (no negative balance, decoy reserve within the real
-- money) hold at every commit. It reads the statement's entries from the transition table
-- new_entries and writes each bot's wallet row once, with every account's sum: a purchase (one
-- INSERT of its two entries) writes the row once instead of once per entry. The CHECKs hold the
-- row as it is after the whole movement. The one definition (it replaced the ones of migrations
-- 0001, 0010 and 0012).
--
-- Not called for spend_run's own INSERT of a purchase's entries (migration 0055: the trigger's
-- condition skips a statement run with botpay.written_by = 'spend_run'): spend_run has already
-- added the same sums to the wallet row, as the UPDATE that is its funds check and lock
-- (spend_run.sql, step 7; test/spend/ownRows.test.ts).
--
-- Same work for the real profile and a decoy (docs/security.md): every movement between a real
-- account and merchant_settlement has a decoy counterpart through decoy_cover, and both write the
-- wallet row once. merchant_settlement and decoy_cover hold no projection, but an entry on them
-- still stamps updated_at (so a movement whose other side holds no projection writes the row like
-- its twin; test/splitKnowledge/ledgerWork.test.ts).
CREATE OR REPLACE FUNCTION ledger_apply_entry() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  e record;
BEGIN
  FOR e IN
    SELECT bot_id, max(created_at) AS at,
           bool_or(account IN ('wallet_available', 'wallet_held', 'decoy_spent', 'decoy_held', 'merchant_settlement', 'decoy_cover')) AS wallet,
           bool_or(account IN ('x402_available', 'x402_held', 'x402_authorized')) AS x402,
           coalesce(sum(amount_micros) FILTER (WHERE account = 'wallet_available'), 0) AS available,
           coalesce(sum(amount_micros) FILTER (WHERE account = 'wallet_held'), 0) AS held,
           coalesce(sum(amount_micros) FILTER (WHERE account = 'decoy_spent'), 0) AS decoy_spent,
           coalesce(sum(amount_micros) FILTER (WHERE account = 'decoy_held'), 0) AS decoy_held,
           coalesce(sum(amount_micros) FILTER (WHERE account = 'x402_available'), 0) AS x402_available,
           coalesce(sum(amount_micros) FILTER (WHERE account = 'x402_held'), 0) AS x402_held,
           coalesce(sum(amount_micros) FILTER (WHERE account = 'x402_authorized'), 0) AS x402_authorized
      FROM new_entries GROUP BY bot_id
  LOOP
    IF e.wallet THEN
      UPDATE wallets SET available_micros = available_micros + e.available, held_micros = held_micros + e.held,
                         decoy_spent_micros = decoy_spent_micros + e.decoy_spent,
                         decoy_held_micros = decoy_held_micros + e.decoy_held, updated_at = e.at
       WHERE bot_id = e.bot_id;
    END IF;
    IF e.x402 THEN
      UPDATE x402_wallets SET available_micros = available_micros + e.x402_available, held_micros = held_micros + e.x402_held,
                              authorized_micros = authorized_micros + e.x402_authorized, updated_at = e.at
       WHERE bot_id = e.bot_id;
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
