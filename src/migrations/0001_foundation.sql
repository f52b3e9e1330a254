-- Foundation: owners, bots, wallets and their double-entry ledger, the event outbox,
-- rate-limit hits and the owner audit log. Money is integer cents (bigint) everywhere.

CREATE TABLE owners (
  id text PRIMARY KEY,
  email text NOT NULL,
  email_normalized text NOT NULL UNIQUE,
  -- Master guardrails cap real-money spending across all of the owner's bots.
  master_per_transaction_cents bigint NOT NULL DEFAULT 500 CHECK (master_per_transaction_cents >= 0),
  master_daily_cents bigint NOT NULL DEFAULT 2000 CHECK (master_daily_cents >= 0),
  master_monthly_cents bigint NOT NULL DEFAULT 10000 CHECK (master_monthly_cents >= 0),
  created_at timestamptz NOT NULL
);

CREATE TABLE owner_tokens (
  id text PRIMARY KEY,
  owner_id text NOT NULL REFERENCES owners(id),
  token_hash text NOT NULL UNIQUE,
  token_prefix text NOT NULL,
  label text,
  created_at timestamptz NOT NULL,
  revoked_at timestamptz
);

CREATE TABLE bots (
  id text PRIMARY KEY,
  name text NOT NULL,
  owner_email text NOT NULL,
  owner_email_normalized text NOT NULL,
  description text,
  bot_type text NOT NULL,
  owner_id text REFERENCES owners(id),
  claim_token_hash text UNIQUE,
  claimed_at timestamptz,
  api_key_hash text NOT NULL UNIQUE,
  api_key_prefix text NOT NULL,
  webhook_secret_enc text NOT NULL,
  callback_url text,
  tunnel_token_hash text UNIQUE,
  tunnel_hostname text UNIQUE,
  local_port integer,
  webhook_path text,
  hooks_token_enc text,
  webhook_status text NOT NULL CHECK (webhook_status IN ('pending', 'active', 'degraded', 'unreachable')),
  webhook_fail_count integer NOT NULL DEFAULT 0,
  registered_ip text,
  created_at timestamptz NOT NULL,
  UNIQUE (owner_email_normalized, name)
);
CREATE INDEX bots_owner_idx ON bots (owner_id);

CREATE TABLE wallets (
  bot_id text PRIMARY KEY REFERENCES bots(id),
  status text NOT NULL CHECK (status IN ('pending', 'active', 'frozen')),
  -- Projections of the ledger, maintained by the trigger below in the same transaction as the
  -- entries. The CHECKs make a negative available balance (or hold) impossible.
  available_cents bigint NOT NULL DEFAULT 0 CHECK (available_cents >= 0),
  held_cents bigint NOT NULL DEFAULT 0 CHECK (held_cents >= 0),
  updated_at timestamptz NOT NULL
);

CREATE TABLE rails (
  bot_id text NOT NULL REFERENCES bots(id),
  rail_key text NOT NULL CHECK (rail_key IN ('card_wallet', 'partner_wallet')),
  status text NOT NULL CHECK (status IN ('active', 'inactive')),
  address text,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (bot_id, rail_key)
);

CREATE TABLE pairing_codes (
  id text PRIMARY KEY,
  owner_id text NOT NULL REFERENCES owners(id),
  code_hash text NOT NULL,
  expires_at timestamptz NOT NULL,
  used_at timestamptz,
  used_by_bot_id text,
  created_at timestamptz NOT NULL
);
-- An unused code's digits are unique; used codes keep their row for the record.
CREATE UNIQUE INDEX pairing_codes_unused_idx ON pairing_codes (code_hash) WHERE used_at IS NULL;
CREATE INDEX pairing_codes_owner_idx ON pairing_codes (owner_id, created_at);

-- Double-entry ledger. Every ledger transaction's entries sum to zero (checked at commit).
-- Accounts: wallet_available and wallet_held belong to a bot's wallet; owner_funding is money the
-- owner put in; merchant_settlement is money paid out for purchases.
CREATE TABLE ledger_transactions (
  id text PRIMARY KEY,
  bot_id text NOT NULL REFERENCES bots(id),
  kind text NOT NULL,
  reference text,
  description text,
  created_at timestamptz NOT NULL
);
CREATE INDEX ledger_transactions_bot_idx ON ledger_transactions (bot_id, created_at DESC);
-- One money movement of a kind per reference (for example one capture per confirmation).
CREATE UNIQUE INDEX ledger_transactions_reference_idx ON ledger_transactions (kind, reference)
  WHERE reference IS NOT NULL;

CREATE TABLE ledger_entries (
  id bigserial PRIMARY KEY,
  transaction_id text NOT NULL REFERENCES ledger_transactions(id),
  bot_id text NOT NULL REFERENCES bots(id),
  account text NOT NULL CHECK (account IN ('wallet_available', 'wallet_held', 'owner_funding', 'merchant_settlement')),
  amount_cents bigint NOT NULL CHECK (amount_cents <> 0),
  created_at timestamptz NOT NULL
);
CREATE INDEX ledger_entries_transaction_idx ON ledger_entries (transaction_id);

CREATE FUNCTION ledger_apply_entry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.account = 'wallet_available' THEN
    UPDATE wallets SET available_cents = available_cents + NEW.amount_cents, updated_at = NEW.created_at
      WHERE bot_id = NEW.bot_id;
  ELSIF NEW.account = 'wallet_held' THEN
    UPDATE wallets SET held_cents = held_cents + NEW.amount_cents, updated_at = NEW.created_at
      WHERE bot_id = NEW.bot_id;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER ledger_entries_apply AFTER INSERT ON ledger_entries
  FOR EACH ROW EXECUTE FUNCTION ledger_apply_entry();

CREATE FUNCTION ledger_check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE total bigint;
BEGIN
  SELECT coalesce(sum(amount_cents), 0) INTO total FROM ledger_entries WHERE transaction_id = NEW.transaction_id;
  IF total <> 0 THEN
    RAISE EXCEPTION 'ledger transaction % is not balanced (sum %)', NEW.transaction_id, total
      USING ERRCODE = '23514';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_check_balanced();

-- Ledger rows are history: never changed, never deleted.
CREATE FUNCTION ledger_forbid_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger rows are append-only';
END $$;
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
  FOR EACH ROW EXECUTE FUNCTION ledger_forbid_change();

-- Transactional outbox: every event is written in the same transaction as the change it reports.
-- body is the exact JSON text that is delivered (signed bytes never change between retries).
CREATE TABLE events (
  id text PRIMARY KEY,
  -- Commit-independent insertion order (timestamps tie under a fake clock or within a millisecond).
  seq bigserial NOT NULL UNIQUE,
  bot_id text NOT NULL REFERENCES bots(id),
  type text NOT NULL,
  body text NOT NULL,
  created_at timestamptz NOT NULL,
  delivered_at timestamptz,
  acked_at timestamptz
);
CREATE INDEX events_bot_idx ON events (bot_id, created_at);
CREATE INDEX events_undelivered_idx ON events (bot_id, created_at) WHERE delivered_at IS NULL AND acked_at IS NULL;

-- Sliding-window rate limits shared by every instance: one row per counted request.
CREATE TABLE rate_limit_hits (
  id bigserial PRIMARY KEY,
  key text NOT NULL,
  at timestamptz NOT NULL
);
CREATE INDEX rate_limit_hits_key_idx ON rate_limit_hits (key, at);

CREATE TABLE audit_log (
  id bigserial PRIMARY KEY,
  owner_id text REFERENCES owners(id),
  bot_id text REFERENCES bots(id),
  action text NOT NULL,
  details jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at timestamptz NOT NULL
);
CREATE INDEX audit_log_bot_idx ON audit_log (bot_id, created_at DESC);
CREATE INDEX audit_log_owner_idx ON audit_log (owner_id, created_at DESC);

-- Spending in a window (UTC day, ISO week, UTC month), kept as counters updated in the same
-- transaction as the hold or debit, so a checkout costs the same with a million past purchases as
-- with none. scope: 'owner:<id>' (master budget, real profiles only), 'bot:<id>', 'card:<id>',
-- 'profile:<card_id>:<index>'. Holds count as spent until they are released.
CREATE TABLE spend_counters (
  scope text NOT NULL,
  window_kind text NOT NULL CHECK (window_kind IN ('day', 'week', 'month')),
  window_start timestamptz NOT NULL,
  spent_cents bigint NOT NULL DEFAULT 0 CHECK (spent_cents >= 0),
  PRIMARY KEY (scope, window_kind, window_start)
);

-- Self-hosted cards with split knowledge. The service never holds a whole card number: it keeps
-- only the 3 missing digits and the expiry, encrypted with SECRET_KEY (secret_enc), and knows
-- which of the 6 payment profiles is the real one. Profiles, allowances and checkouts come with
-- the checkout engine's migration.
CREATE TABLE cards (
  id text PRIMARY KEY,
  bot_id text NOT NULL REFERENCES bots(id),
  label text,
  status text NOT NULL CHECK (status IN ('pending_activation', 'active', 'frozen')),
  real_profile_index integer NOT NULL CHECK (real_profile_index BETWEEN 1 AND 6),
  -- First of the three consecutive 0-based positions of the card number the owner types in.
  missing_position integer NOT NULL CHECK (missing_position BETWEEN 0 AND 13),
  secret_enc text,
  per_transaction_cents bigint NOT NULL DEFAULT 500 CHECK (per_transaction_cents >= 0),
  daily_cents bigint NOT NULL DEFAULT 1000 CHECK (daily_cents >= 0),
  monthly_cents bigint NOT NULL DEFAULT 5000 CHECK (monthly_cents >= 0),
  approval_mode text NOT NULL DEFAULT 'ask_for_everything'
    CHECK (approval_mode IN ('ask_for_everything', 'auto_approve_under_threshold', 'auto_approve_by_category')),
  approval_threshold_cents bigint NOT NULL DEFAULT 0 CHECK (approval_threshold_cents >= 0),
  approved_categories jsonb NOT NULL DEFAULT '[]'::jsonb,
  created_at timestamptz NOT NULL,
  activated_at timestamptz
);
CREATE INDEX cards_bot_idx ON cards (bot_id);

-- Notifications without serialising commits. PostgreSQL makes every transaction that NOTIFYs
-- take a global lock through its commit, which caps write throughput. So inside transactions the
-- service only announces what to notify: botpay_notify() raises a NOTICE the PostgreSQL driver
-- collects, and the driver sends the NOTIFYs after COMMIT (src/platform/db/postgres.ts). Sessions
-- that do not ask for that (PGlite, psql) get a plain pg_notify at commit.
CREATE FUNCTION botpay_notify(channel text, payload text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('botpay.defer_notify', true) = 'on' THEN
    RAISE NOTICE 'botpay-notify %|%', channel, payload;
  ELSE
    PERFORM pg_notify(channel, payload);
  END IF;
END $$;

-- Every change that shows in a bot's status or wallet check is announced on botpay_bot_state
-- ('bot:<id>' or 'owner:<id>'); every instance drops its cached copy (src/bots/stateCache.ts).
CREATE FUNCTION notify_bot_state() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
  key text;
BEGIN
  IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
  IF TG_TABLE_NAME = 'bots' THEN key := 'bot:' || r.id;
  ELSIF TG_TABLE_NAME = 'owners' THEN key := 'owner:' || r.id;
  ELSIF TG_TABLE_NAME = 'spend_counters' THEN key := r.scope;
  ELSE key := 'bot:' || r.bot_id;
  END IF;
  IF key LIKE 'bot:%' OR key LIKE 'owner:%' THEN
    PERFORM botpay_notify('botpay_bot_state', key);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER bots_state AFTER INSERT OR UPDATE OR DELETE ON bots FOR EACH ROW EXECUTE FUNCTION notify_bot_state();
CREATE TRIGGER owners_state AFTER UPDATE ON owners FOR EACH ROW EXECUTE FUNCTION notify_bot_state();
CREATE TRIGGER wallets_state AFTER INSERT OR UPDATE ON wallets FOR EACH ROW EXECUTE FUNCTION notify_bot_state();
CREATE TRIGGER rails_state AFTER INSERT OR UPDATE OR DELETE ON rails FOR EACH ROW EXECUTE FUNCTION notify_bot_state();
CREATE TRIGGER cards_state AFTER INSERT OR UPDATE OR DELETE ON cards FOR EACH ROW EXECUTE FUNCTION notify_bot_state();
CREATE TRIGGER events_state AFTER INSERT OR UPDATE OR DELETE ON events FOR EACH ROW EXECUTE FUNCTION notify_bot_state();
CREATE TRIGGER spend_counters_state AFTER INSERT OR UPDATE ON spend_counters FOR EACH ROW EXECUTE FUNCTION notify_bot_state();

-- A new event wakes the delivery workers of every instance (channel botpay_events), whichever
-- code path inserted it.
CREATE FUNCTION notify_new_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM botpay_notify('botpay_events', NEW.bot_id);
  RETURN NULL;
END $$;
CREATE TRIGGER events_wake AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION notify_new_event();
