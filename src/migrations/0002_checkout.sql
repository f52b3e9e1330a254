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
  -- No foreign key: owner_id is copied from the bot in the same statement, and a FOR KEY SHARE lock
  -- on the owner row from every concurrent checkout of the owner's bots would create MultiXacts.
  owner_id text NOT NULL,
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

-- The guardrail chain of one checkout, in one call (SPEC §4.4 order): wallet status → card
-- resolution → card per-transaction → card daily/monthly → profile allowance → master limits (real
-- profile only) → funds → approval mode; then the confirmation, its ledger rows (real profile only)
-- and the purchase.approved event. It runs inside the caller's transaction (after the rate limit);
-- on any refusal it returns {"error": …} and the caller rolls the transaction back, so counters
-- added before the refusal disappear with it. One call instead of a dozen round trips keeps a
-- checkout within a small multiple of a minimal transaction.
--
-- Locks, in the one global order: counter rows card → profile → owner → bot, then the wallet row.
-- Each counter is added with a conditional upsert: under READ COMMITTED the WHERE is re-checked on
-- the newest row version after waiting for its lock, so no interleaving passes a limit.
--
-- Mirrors (keep in step): src/checkout/guardrails.ts counterSpecs (scopes released on deny/expiry)
-- and needsApproval; src/wallet/ledger.ts debitPurchase/placeHold (descriptions);
-- src/events/outbox.ts (event row; the NOTIFY is sent by the caller after commit).
CREATE FUNCTION checkout_add_counter(p_scope text, p_kind text, p_start timestamptz, p_amount bigint, p_limit bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE added bigint;
BEGIN
  -- Returns -1 when added, otherwise what is already spent in the window.
  IF p_limit IS NOT NULL AND p_amount > p_limit THEN
    SELECT coalesce(max(spent_cents), 0) INTO added FROM spend_counters
      WHERE scope = p_scope AND window_kind = p_kind AND window_start = p_start;
    RETURN added;
  END IF;
  INSERT INTO spend_counters AS c (scope, window_kind, window_start, spent_cents)
    VALUES (p_scope, p_kind, p_start, p_amount)
    ON CONFLICT (scope, window_kind, window_start) DO UPDATE SET spent_cents = c.spent_cents + EXCLUDED.spent_cents
      WHERE p_limit IS NULL OR c.spent_cents + EXCLUDED.spent_cents <= p_limit
    RETURNING c.spent_cents INTO added;
  IF FOUND THEN RETURN -1; END IF;
  SELECT spent_cents INTO added FROM spend_counters WHERE scope = p_scope AND window_kind = p_kind AND window_start = p_start;
  RETURN added;
END $$;

CREATE FUNCTION checkout_attempt(
  p_bot_id text, p_card_id text, p_profile_index integer, p_amount bigint, p_category text,
  p_id text, p_merchant_name text, p_merchant_url text, p_item_name text, p_task_id text,
  p_now timestamptz, p_day timestamptz, p_week timestamptz, p_month timestamptz,
  p_window_seconds integer, p_decoy_decide_at timestamptz, p_decoy_outcome text,
  p_ledger_id text, p_event_id text, p_event_body text
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  st record;
  card cards%ROWTYPE;
  prof card_profiles%ROWTYPE;
  n integer;
  is_real boolean;
  card_scope text;
  prof_start timestamptz;
  spent bigint;
  available bigint;
  automatic boolean;
  held boolean;
BEGIN
  -- 1. Wallet status.
  SELECT b.owner_id, w.status, o.master_per_transaction_cents AS m_tx, o.master_daily_cents AS m_day,
         o.master_monthly_cents AS m_month
    INTO st FROM bots b JOIN wallets w ON w.bot_id = b.id LEFT JOIN owners o ON o.id = b.owner_id
   WHERE b.id = p_bot_id;
  IF st.owner_id IS NULL OR st.status = 'pending' THEN RETURN jsonb_build_object('error', 'wallet_not_active'); END IF;
  IF st.status = 'frozen' THEN RETURN jsonb_build_object('error', 'wallet_frozen'); END IF;

  -- 2. Card resolution and the profile.
  IF p_card_id IS NOT NULL THEN
    SELECT * INTO card FROM cards WHERE id = p_card_id AND bot_id = p_bot_id;
    IF NOT FOUND THEN RETURN jsonb_build_object('error', 'card_not_found'); END IF;
    IF card.status <> 'active' THEN RETURN jsonb_build_object('error', 'card_not_active'); END IF;
  ELSE
    SELECT count(*) INTO n FROM (SELECT 1 FROM cards WHERE bot_id = p_bot_id AND status = 'active' LIMIT 2) x;
    IF n = 0 THEN RETURN jsonb_build_object('error', 'card_not_active'); END IF;
    IF n > 1 THEN RETURN jsonb_build_object('error', 'card_id_required'); END IF;
    SELECT * INTO card FROM cards WHERE bot_id = p_bot_id AND status = 'active';
    -- Frozen by the owner between the two reads.
    IF NOT FOUND THEN RETURN jsonb_build_object('error', 'card_not_active'); END IF;
  END IF;
  SELECT * INTO prof FROM card_profiles WHERE card_id = card.id AND profile_index = p_profile_index;
  IF NOT FOUND OR NOT prof.enabled THEN RETURN jsonb_build_object('error', 'invalid_profile'); END IF;
  is_real := card.real_profile_index = p_profile_index;

  -- 2. Card guardrails. A decoy keeps card-level windows of its own ('card:<id>:p<index>').
  IF p_amount > card.per_transaction_cents THEN
    RETURN jsonb_build_object('error', 'limit', 'name', 'card_per_transaction', 'limit_cents', card.per_transaction_cents);
  END IF;
  card_scope := CASE WHEN is_real THEN 'card:' || card.id ELSE 'card:' || card.id || ':p' || p_profile_index END;
  spent := checkout_add_counter(card_scope, 'day', p_day, p_amount, card.daily_cents);
  IF spent >= 0 THEN RETURN jsonb_build_object('error', 'limit', 'name', 'card_daily', 'limit_cents', card.daily_cents, 'spent_cents', spent); END IF;
  spent := checkout_add_counter(card_scope, 'month', p_month, p_amount, card.monthly_cents);
  IF spent >= 0 THEN RETURN jsonb_build_object('error', 'limit', 'name', 'card_monthly', 'limit_cents', card.monthly_cents, 'spent_cents', spent); END IF;

  -- 3. Profile allowance.
  prof_start := CASE prof.allowance_window WHEN 'day' THEN p_day WHEN 'week' THEN p_week ELSE p_month END;
  spent := checkout_add_counter('profile:' || card.id || ':' || p_profile_index, prof.allowance_window, prof_start, p_amount, prof.allowance_cents);
  IF spent >= 0 THEN
    RETURN jsonb_build_object('error', 'limit', 'name', 'profile_allowance', 'limit_cents', prof.allowance_cents,
                              'spent_cents', spent, 'window', prof.allowance_window);
  END IF;

  -- 4. Master guardrails (real profile only), and the bot's own figures.
  IF is_real THEN
    IF p_amount > st.m_tx THEN
      RETURN jsonb_build_object('error', 'limit', 'name', 'master_per_transaction', 'limit_cents', st.m_tx);
    END IF;
    spent := checkout_add_counter('owner:' || st.owner_id, 'day', p_day, p_amount, st.m_day);
    IF spent >= 0 THEN RETURN jsonb_build_object('error', 'limit', 'name', 'master_daily', 'limit_cents', st.m_day, 'spent_cents', spent); END IF;
    spent := checkout_add_counter('owner:' || st.owner_id, 'month', p_month, p_amount, st.m_month);
    IF spent >= 0 THEN RETURN jsonb_build_object('error', 'limit', 'name', 'master_monthly', 'limit_cents', st.m_month, 'spent_cents', spent); END IF;
    PERFORM checkout_add_counter('bot:' || p_bot_id, 'day', p_day, p_amount, NULL);
    PERFORM checkout_add_counter('bot:' || p_bot_id, 'month', p_month, p_amount, NULL);
    -- 5. Funds (the wallet row is locked last).
    SELECT available_cents INTO available FROM wallets WHERE bot_id = p_bot_id FOR UPDATE;
  ELSE
    -- A decoy reads the same balance, so 402 happens alike, but never moves it.
    SELECT available_cents INTO available FROM wallets WHERE bot_id = p_bot_id;
  END IF;
  IF available < p_amount THEN RETURN jsonb_build_object('error', 'insufficient_funds', 'balance_cents', available); END IF;

  -- 6. Approval mode: the card decides; the profile rule can only make it stricter.
  automatic := CASE card.approval_mode
    WHEN 'auto_approve_under_threshold' THEN p_amount < card.approval_threshold_cents
    WHEN 'auto_approve_by_category' THEN p_category IS NOT NULL AND card.approved_categories ? lower(p_category)
    ELSE false END;
  IF prof.approval_rule = 'ask_for_everything' THEN automatic := false; END IF;
  IF prof.approval_rule = 'auto_approve_under_threshold' THEN
    automatic := automatic AND p_amount < prof.approval_threshold_cents;
  END IF;
  held := NOT automatic;

  INSERT INTO checkout_confirmations (id, bot_id, owner_id, card_id, profile_index, is_real, profile_window,
      merchant_name, merchant_url, item_name, category, task_id, amount_cents, status, created_at, expires_at,
      decide_at, decoy_outcome, decided_at, decided_by)
    VALUES (p_id, p_bot_id, st.owner_id, card.id, p_profile_index, is_real, prof.allowance_window,
      p_merchant_name, p_merchant_url, p_item_name, p_category, p_task_id, p_amount,
      CASE WHEN held THEN 'pending' ELSE 'approved' END, p_now,
      CASE WHEN held THEN p_now + make_interval(secs => p_window_seconds) END,
      CASE WHEN held AND NOT is_real THEN p_decoy_decide_at END,
      CASE WHEN held AND NOT is_real THEN p_decoy_outcome END,
      CASE WHEN held THEN NULL ELSE p_now END,
      CASE WHEN held THEN NULL ELSE 'guardrails' END);

  IF is_real THEN
    -- debitPurchase (wallet_available → merchant_settlement) or placeHold (→ wallet_held).
    INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at)
      VALUES (p_ledger_id, p_bot_id, CASE WHEN held THEN 'hold' ELSE 'purchase' END, p_id,
              CASE WHEN held THEN 'Held for owner approval' ELSE 'Purchase approved' END, p_now);
    INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_cents, created_at)
      VALUES (p_ledger_id, p_bot_id, 'wallet_available', -p_amount, p_now),
             (p_ledger_id, p_bot_id, CASE WHEN held THEN 'wallet_held' ELSE 'merchant_settlement' END, p_amount, p_now);
  END IF;
  IF NOT held THEN
    -- No NOTIFY here: PostgreSQL serialises the commits of notifying transactions (a global lock
    -- held across the WAL flush), which would cap checkouts at one per fsync. The caller notifies
    -- right after commit; a lost notification only delays delivery until the worker's next poll.
    INSERT INTO events (id, bot_id, type, body, created_at) VALUES (p_event_id, p_bot_id, 'purchase.approved', p_event_body, p_now);
  END IF;

  RETURN jsonb_build_object('ok', true, 'held', held, 'is_real', is_real, 'card_id', card.id,
    'secret_enc', card.secret_enc, 'missing_position', card.missing_position, 'card_created_at', card.created_at,
    'available_before', available, 'profile_window', prof.allowance_window);
END $$;
