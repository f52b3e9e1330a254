-- The wallet projections kept in step with the ledger: the trigger ledger_entries_apply (0001) runs
-- this for every entry, in the entry's transaction, so the wallets CHECKs (no negative balance,
-- decoy reserve within the real money) hold at every commit. The one definition (it replaced the
-- ones of migrations 0001, 0010 and 0012).
--
-- Same work for the real profile and a decoy (docs/security.md): every movement between a real
-- account and merchant_settlement has a decoy counterpart through decoy_cover, and each of its two
-- entries writes the wallet row once, so a purchase, hold, capture or release and its decoy twin
-- both write it twice. merchant_settlement and decoy_cover hold no projection: their entry only
-- stamps updated_at (without it a real hold wrote the row twice and a decoy hold once, which a bot
-- timing its checkouts could tell apart; test/splitKnowledge/ledgerWork.test.ts).
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
  ELSIF NEW.account IN ('merchant_settlement', 'decoy_cover') THEN
    UPDATE wallets SET updated_at = NEW.created_at WHERE bot_id = NEW.bot_id;
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
