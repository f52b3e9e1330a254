-- The partner_wallet rail: a USDC wallet on an EVM chain that pays HTTP 402 ("x402") resources
-- with EIP-3009 authorisations the service signs for the bot (docs/x402.md).

-- One wallet per bot. The private key is encrypted with SECRET_KEY (key_enc) and never leaves the
-- service. The money columns are projections of the ledger's x402_* accounts (trigger below), in
-- whole cents: available (spendable), held (pending owner approval), authorized (signed
-- authorisations not yet settled on chain or lapsed). available + held + authorized is what the
-- ledger says the chain holds; the reconciliation job compares it with the chain.
CREATE TABLE x402_wallets (
  bot_id text PRIMARY KEY REFERENCES bots(id),
  network text NOT NULL,
  asset text NOT NULL,
  address text NOT NULL,
  key_enc text NOT NULL,
  key_source text NOT NULL CHECK (key_source IN ('generated', 'imported')),
  available_cents bigint NOT NULL DEFAULT 0 CHECK (available_cents >= 0),
  held_cents bigint NOT NULL DEFAULT 0 CHECK (held_cents >= 0),
  authorized_cents bigint NOT NULL DEFAULT 0 CHECK (authorized_cents >= 0),
  -- The last balance read from the chain, in micro-USDC (6 decimals), and when.
  chain_balance_micro numeric(78, 0),
  balance_read_at timestamptz,
  -- The block the last reconciliation read at: a deposit is credited once, by the first reader of
  -- a newer block (instances reconciling at once lock this row and compare).
  reconciled_block bigint NOT NULL DEFAULT -1,
  -- The deficit (micro-USDC) the owner was last alerted about; 0 when the chain agrees again.
  alerted_deficit_micro numeric(78, 0) NOT NULL DEFAULT 0,
  per_transaction_cents bigint NOT NULL DEFAULT 100 CHECK (per_transaction_cents > 0),
  daily_cents bigint NOT NULL DEFAULT 1000 CHECK (daily_cents > 0),
  monthly_cents bigint NOT NULL DEFAULT 5000 CHECK (monthly_cents > 0),
  approval_mode text NOT NULL DEFAULT 'auto_approve_under_threshold'
    CHECK (approval_mode IN ('ask_for_everything', 'auto_approve_under_threshold')),
  approval_threshold_cents bigint NOT NULL DEFAULT 50 CHECK (approval_threshold_cents >= 0),
  -- Lists: checksummed pay-to addresses and lower-case host names ("*.example.com" for subdomains).
  -- An empty allow list allows everything the deny list does not name.
  allow_pay_to jsonb NOT NULL DEFAULT '[]',
  deny_pay_to jsonb NOT NULL DEFAULT '[]',
  allow_domains jsonb NOT NULL DEFAULT '[]',
  deny_domains jsonb NOT NULL DEFAULT '[]',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  UNIQUE (network, address)
);

-- Every payment the bot asked for. status: pending (held for the owner), denied, expired (the
-- owner did not decide), authorized (signed, not yet seen on chain), settled (the authorisation
-- was used on chain: tx_hash), lapsed (its validity ended unused: the amount came back).
CREATE TABLE x402_payments (
  id text PRIMARY KEY,
  bot_id text NOT NULL REFERENCES bots(id),
  owner_id text NOT NULL,
  resource_url text NOT NULL,
  resource_domain text NOT NULL,
  description text,
  network text NOT NULL,
  asset text NOT NULL,
  pay_from text NOT NULL,
  pay_to text NOT NULL,
  amount_micro numeric(78, 0) NOT NULL CHECK (amount_micro > 0),
  amount_cents bigint NOT NULL CHECK (amount_cents > 0),
  requirements jsonb NOT NULL,
  status text NOT NULL CHECK (status IN ('pending', 'denied', 'expired', 'authorized', 'settled', 'lapsed')),
  nonce text UNIQUE,
  valid_before bigint,
  payload_enc text,
  tx_hash text,
  created_at timestamptz NOT NULL,
  authorized_at timestamptz,
  finished_at timestamptz
);
CREATE INDEX x402_payments_bot_idx ON x402_payments (bot_id, created_at DESC);
CREATE INDEX x402_payments_open_idx ON x402_payments (valid_before) WHERE status = 'authorized';

-- A held x402 payment is a confirmation like a held card purchase: the same inbox, one-click
-- mail, approve / deny / expire paths and purchase.* events. It has no card.
ALTER TABLE checkout_confirmations ADD COLUMN rail text NOT NULL DEFAULT 'card_wallet'
  CHECK (rail IN ('card_wallet', 'partner_wallet'));
ALTER TABLE checkout_confirmations ALTER COLUMN card_id DROP NOT NULL;
ALTER TABLE checkout_confirmations ADD CONSTRAINT checkout_confirmations_rail_card_check
  CHECK ((rail = 'card_wallet') = (card_id IS NOT NULL));

-- The partner wallet's ledger accounts, beside the card wallet's: x402_deposits (what arrived on
-- chain, negative), x402_available / x402_held / x402_authorized (projected on x402_wallets) and
-- x402_paid (what left through settled authorisations).
ALTER TABLE ledger_entries DROP CONSTRAINT IF EXISTS ledger_entries_account_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_account_check CHECK (account IN (
  'wallet_available', 'wallet_held', 'owner_funding', 'merchant_settlement',
  'decoy_cover', 'decoy_spent', 'decoy_held',
  'x402_deposits', 'x402_available', 'x402_held', 'x402_authorized', 'x402_paid'));

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
