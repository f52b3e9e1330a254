-- The wallet projections kept in step with the ledger: the trigger ledger_entries_apply (0001) runs
-- this for every entry, in the entry's transaction, so the wallets CHECKs (no negative balance,
-- decoy reserve within the real money) hold at every commit. The one definition (it replaced the
-- ones of migrations 0001, 0010 and 0012).
CREATE OR REPLACE FUNCTION ledger_apply_entry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.account = 'wallet_available' THEN
    UPDATE wallets SET available_cents = available_cents + NEW.amount_cents, updated_at = NEW.created_at
      WHERE bot_id = NEW.bot_id;
  ELSIF NEW.account = 'wallet_held' THEN
    UPDATE wallets SET held_cents = held_cents + NEW.amount_cents, updated_at = NEW.created_at
      WHERE bot_id = NEW.bot_id;
  ELSIF NEW.account = 'decoy_spent' THEN
    UPDATE wallets SET decoy_spent_cents = decoy_spent_cents + NEW.amount_cents, updated_at = NEW.created_at
      WHERE bot_id = NEW.bot_id;
  ELSIF NEW.account = 'decoy_held' THEN
    UPDATE wallets SET decoy_held_cents = decoy_held_cents + NEW.amount_cents, updated_at = NEW.created_at
      WHERE bot_id = NEW.bot_id;
  ELSIF NEW.account = 'x402_available' THEN
    UPDATE x402_wallets SET available_cents = available_cents + NEW.amount_cents, updated_at = NEW.created_at
      WHERE bot_id = NEW.bot_id;
  ELSIF NEW.account = 'x402_held' THEN
    UPDATE x402_wallets SET held_cents = held_cents + NEW.amount_cents, updated_at = NEW.created_at
      WHERE bot_id = NEW.bot_id;
  ELSIF NEW.account = 'x402_authorized' THEN
    UPDATE x402_wallets SET authorized_cents = authorized_cents + NEW.amount_cents, updated_at = NEW.created_at
      WHERE bot_id = NEW.bot_id;
  END IF;
  RETURN NEW;
END $$;
