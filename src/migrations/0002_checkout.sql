-- Checkout engine: payment profiles of a card, checkout confirmations (approved at once, or
-- pending owner approval with a hold), and idempotency keys of checkout requests.

-- The 6 payment profiles of a card. Allowance: spending per UTC day, ISO week or UTC month
-- (counted in spend_counters under 'profile:<card_id>:<index>'). approval_rule can only make the
-- card's approval decision stricter. A disabled profile answers 400 invalid_profile.
CREATE TABLE card_profiles (
  card_id text NOT NULL REFERENCES cards(id),
  profile_index integer NOT NULL CHECK (profile_index BETWEEN 1 AND 6),
  enabled boolean NOT NULL DEFAULT true,
  allowance_cents bigint NOT NULL DEFAULT 5000 CHECK (allowance_cents >= 0),
  allowance_window text NOT NULL DEFAULT 'week' CHECK (allowance_window IN ('day', 'week', 'month')),
  approval_rule text NOT NULL DEFAULT 'follow_card'
    CHECK (approval_rule IN ('follow_card', 'ask_for_everything', 'auto_approve_under_threshold')),
  approval_threshold_cents bigint NOT NULL DEFAULT 0 CHECK (approval_threshold_cents >= 0),
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (card_id, profile_index)
);

-- One checkout request that passed the guardrail chain. is_real is false for a decoy profile:
-- a decoy never moves money (no ledger rows) and is decided by the service at decide_at.
-- The spending counters a confirmation touched are recomputed from these columns (scopes and
-- created_at's windows) when a hold is released.
CREATE TABLE checkout_confirmations (
  id text PRIMARY KEY,
  bot_id text NOT NULL REFERENCES bots(id),
  owner_id text NOT NULL REFERENCES owners(id),
  card_id text NOT NULL REFERENCES cards(id),
  profile_index integer NOT NULL,
  is_real boolean NOT NULL,
  profile_window text NOT NULL CHECK (profile_window IN ('day', 'week', 'month')),
  merchant_name text NOT NULL,
  merchant_url text NOT NULL,
  item_name text NOT NULL,
  category text,
  task_id text,
  amount_cents bigint NOT NULL CHECK (amount_cents > 0),
  status text NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
  created_at timestamptz NOT NULL,
  expires_at timestamptz,
  decide_at timestamptz,
  decoy_outcome text CHECK (decoy_outcome IN ('approved', 'denied', 'expired')),
  decided_at timestamptz,
  decided_by text
);
CREATE INDEX checkout_confirmations_bot_idx ON checkout_confirmations (bot_id, created_at DESC);
CREATE INDEX checkout_confirmations_owner_pending_idx ON checkout_confirmations (owner_id, created_at)
  WHERE status = 'pending' AND is_real;
-- What the expiry/decision job scans: pending confirmations by their due time.
CREATE INDEX checkout_confirmations_due_idx ON checkout_confirmations ((coalesce(decide_at, expires_at)))
  WHERE status = 'pending';

-- Idempotency-Key of POST checkout: the first successful response is replayed for 24 hours.
-- The body is encrypted (it can hold card digits).
CREATE TABLE checkout_idempotency (
  bot_id text NOT NULL REFERENCES bots(id),
  key text NOT NULL,
  request_hash text NOT NULL,
  status_code integer,
  response_enc text,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (bot_id, key)
);
CREATE INDEX checkout_idempotency_created_idx ON checkout_idempotency (created_at);
