-- Split knowledge that holds (docs/security.md): profiles built where the full number is typed,
-- decoy spending that moves the bot's figures like real spending, decoy decisions that follow the
-- owner's own, and decoy tasks that shadow the owner's schedules instead of reacting to checkouts.

-- Cards added through the card wizard or `botpay card split` (format 2): the service receives, for
-- each of the six profiles, the three digits at the missing positions and the expiry (the real
-- profile's digits and expiry are the owner's; a decoy's complete its own number to a Luhn-valid
-- one). All six are encrypted together in profiles_enc. Older cards keep secret_enc.
ALTER TABLE cards ADD COLUMN card_length integer CHECK (card_length BETWEEN 12 AND 19);
ALTER TABLE cards ADD COLUMN profiles_enc text;
ALTER TABLE cards DROP CONSTRAINT IF EXISTS cards_missing_position_check;
ALTER TABLE cards ADD CONSTRAINT cards_missing_position_check CHECK (missing_position BETWEEN 0 AND 16);

-- The decoy reserve: what decoy purchases took from the balance the bot sees (spent, or held for a
-- pending decoy). The bot sees available − decoy_spent − decoy_held, so decoy purchases lower it
-- exactly as real ones do; the reserve never exceeds the real money.
ALTER TABLE wallets ADD COLUMN decoy_spent_cents bigint NOT NULL DEFAULT 0 CHECK (decoy_spent_cents >= 0);
ALTER TABLE wallets ADD COLUMN decoy_held_cents bigint NOT NULL DEFAULT 0 CHECK (decoy_held_cents >= 0);
ALTER TABLE wallets ADD CONSTRAINT wallets_decoy_reserve_check
  CHECK (available_cents >= decoy_spent_cents + decoy_held_cents);

-- Decoy movements are ledger transactions too (memo accounts, never money): decoy_cover is where
-- the reserve comes from and returns to; decoy_spent / decoy_held mirror merchant_settlement /
-- wallet_held. So a decoy purchase writes the same rows as a real one.
ALTER TABLE ledger_entries DROP CONSTRAINT IF EXISTS ledger_entries_account_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_account_check CHECK (account IN (
  'wallet_available', 'wallet_held', 'owner_funding', 'merchant_settlement',
  'decoy_cover', 'decoy_spent', 'decoy_held'));

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
  END IF;
  RETURN NEW;
END $$;

-- Decoy tasks shadow the owner's schedules: one hidden schedule per decoy profile, with the owner
-- schedule's cron moved by a fixed offset (shadow_offset_ms), so every profile is tasked alike.
ALTER TABLE task_schedules ADD COLUMN shadow_of text REFERENCES task_schedules(id);
ALTER TABLE task_schedules ADD COLUMN shadow_offset_ms bigint NOT NULL DEFAULT 0;
CREATE INDEX task_schedules_shadow_idx ON task_schedules (shadow_of) WHERE shadow_of IS NOT NULL;

-- Decoys planned by the old engine reacted to real purchases (a tell): they lapse.
UPDATE tasks SET status = 'expired', completed_at = now() WHERE status = 'planned';
DROP TABLE decoy_pacing;

-- What decoy decisions sample: the owner's own decided real holds, newest first.
CREATE INDEX checkout_confirmations_owner_decided_idx ON checkout_confirmations (owner_id, decided_at DESC)
  WHERE is_real AND decided_by IN ('owner', 'expiry');

-- Each profile has a decision persona, drawn when the card is activated from a model of how owners
-- decide (src/cards/personas.ts): the median and spread of the delay, and the shares of denials and
-- of holds left to expire. Before the service knows the owner, a held decoy is decided like its
-- profile's persona, so the six profiles look like six plausible people; as the owner's own
-- decisions accumulate, decoys follow them instead (decoy_decision_sample).
ALTER TABLE card_profiles ADD COLUMN persona_delay_ms integer NOT NULL DEFAULT 120000;
ALTER TABLE card_profiles ADD COLUMN persona_sigma real NOT NULL DEFAULT 0.6;
ALTER TABLE card_profiles ADD COLUMN persona_deny real NOT NULL DEFAULT 0.1;
ALTER TABLE card_profiles ADD COLUMN persona_expire real NOT NULL DEFAULT 0.05;

-- A held decoy's outcome and delay: with probability n/(n+10) one of the owner's own last n (≤ 50)
-- decided real holds, its delay jittered by ±15 % (log scale); otherwise a draw from the profile's
-- persona. Returns the delay in milliseconds (null: expire at the end of the window) and the outcome.
CREATE FUNCTION decoy_decision_sample(
  p_owner_id text, p_delay_ms integer, p_sigma real, p_deny real, p_expire real, p_window_seconds integer,
  OUT delay_ms bigint, OUT outcome text)
LANGUAGE plpgsql AS $$
DECLARE
  n integer;
  pick record;
  gauss double precision;
  roll double precision;
BEGIN
  SELECT count(*) INTO n FROM (SELECT 1 FROM checkout_confirmations
    WHERE owner_id = p_owner_id AND is_real AND decided_by IN ('owner', 'expiry')
    ORDER BY decided_at DESC LIMIT 50) h;
  gauss := sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random());
  IF n > 0 AND random() < n::double precision / (n + 10) THEN
    SELECT status, extract(epoch FROM decided_at - created_at) * 1000 AS ms INTO pick
      FROM (SELECT status, decided_at, created_at FROM checkout_confirmations
             WHERE owner_id = p_owner_id AND is_real AND decided_by IN ('owner', 'expiry')
             ORDER BY decided_at DESC LIMIT 50) h
      OFFSET floor(random() * n)::integer LIMIT 1;
    outcome := pick.status;
    delay_ms := round(pick.ms * exp(0.15 * gauss));
  ELSE
    roll := random();
    outcome := CASE WHEN roll < p_expire THEN 'expired' WHEN roll < p_expire + p_deny THEN 'denied' ELSE 'approved' END;
    delay_ms := round(p_delay_ms * exp(p_sigma * gauss));
  END IF;
  IF outcome = 'expired' THEN
    delay_ms := NULL;
  ELSE
    delay_ms := least(greatest(delay_ms, 1000), p_window_seconds * 1000 - 1000);
  END IF;
END $$;

-- The guardrail chain, for format-2 split knowledge (replaces 0002's). Differences:
-- - every profile is checked against the visible balance (available − decoy reserve) and counts in
--   the bot's own counters, so balance and spend figures move alike;
-- - every profile is checked against the master guardrails in its own world (the owner's real
--   spending, with this card's real-profile spending replaced by this profile's); only the real
--   profile spends the owner's real budget;
-- - a decoy writes decoy ledger rows (decoy_cover → decoy_spent / decoy_held) where a real
--   purchase writes money rows; a held decoy gets its outcome from decoy_decision_sample.
DROP FUNCTION checkout_attempt(text, text, integer, bigint, text, text, text, text, text, text,
  timestamptz, timestamptz, timestamptz, timestamptz, integer, timestamptz, text, text, text, text);

CREATE FUNCTION checkout_attempt(
  p_bot_id text, p_card_id text, p_profile_index integer, p_amount bigint, p_category text,
  p_id text, p_merchant_name text, p_merchant_url text, p_item_name text, p_task_id text,
  p_now timestamptz, p_day timestamptz, p_week timestamptz, p_month timestamptz,
  p_window_seconds integer, p_ledger_id text, p_event_id text, p_event_body text
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
  world_day bigint;
  world_month bigint;
  available bigint;
  automatic boolean;
  held boolean;
  d_delay bigint;
  d_outcome text;
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
    IF NOT FOUND THEN RETURN jsonb_build_object('error', 'card_not_active'); END IF;
  END IF;
  SELECT * INTO prof FROM card_profiles WHERE card_id = card.id AND profile_index = p_profile_index;
  IF NOT FOUND OR NOT prof.enabled THEN RETURN jsonb_build_object('error', 'invalid_profile'); END IF;
  is_real := card.real_profile_index = p_profile_index;

  -- 2. Card guardrails, in windows of the profile's own world ('card:<id>' for the real profile,
  -- 'card:<id>:p<index>' for a decoy).
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

  -- 4. Master guardrails, checked for every profile in its own world: the owner's spending with
  -- this card's real-profile spending replaced by this profile's (for the real profile, simply the
  -- owner's spending). Then the real profile spends the owner's budget (the conditional upsert is
  -- the authoritative check under concurrency) and a decoy counts in a memo counter of the owner's
  -- ('owner:<id>:decoy', never read): the same statements either way, so the same time.
  IF p_amount > st.m_tx THEN
    RETURN jsonb_build_object('error', 'limit', 'name', 'master_per_transaction', 'limit_cents', st.m_tx);
  END IF;
  SELECT coalesce(sum(w.v) FILTER (WHERE w.window_kind = 'day'), 0), coalesce(sum(w.v) FILTER (WHERE w.window_kind = 'month'), 0)
    INTO world_day, world_month
    FROM (SELECT c.window_kind,
                 CASE WHEN c.scope = 'card:' || card.id THEN CASE WHEN is_real THEN 0 ELSE -c.spent_cents END
                      ELSE c.spent_cents END AS v
            FROM spend_counters c
           WHERE c.scope IN ('owner:' || st.owner_id, 'card:' || card.id, card_scope)
             AND ((c.window_kind = 'day' AND c.window_start = p_day) OR (c.window_kind = 'month' AND c.window_start = p_month))) w;
  IF NOT is_real THEN
    -- The profile's card counters already hold this purchase.
    world_day := world_day - p_amount;
    world_month := world_month - p_amount;
  END IF;
  IF world_day + p_amount > st.m_day THEN RETURN jsonb_build_object('error', 'limit', 'name', 'master_daily', 'limit_cents', st.m_day, 'spent_cents', world_day); END IF;
  IF world_month + p_amount > st.m_month THEN RETURN jsonb_build_object('error', 'limit', 'name', 'master_monthly', 'limit_cents', st.m_month, 'spent_cents', world_month); END IF;
  spent := checkout_add_counter('owner:' || st.owner_id || CASE WHEN is_real THEN '' ELSE ':decoy' END, 'day', p_day, p_amount,
                                CASE WHEN is_real THEN st.m_day END);
  IF spent >= 0 THEN RETURN jsonb_build_object('error', 'limit', 'name', 'master_daily', 'limit_cents', st.m_day, 'spent_cents', spent); END IF;
  spent := checkout_add_counter('owner:' || st.owner_id || CASE WHEN is_real THEN '' ELSE ':decoy' END, 'month', p_month, p_amount,
                                CASE WHEN is_real THEN st.m_month END);
  IF spent >= 0 THEN RETURN jsonb_build_object('error', 'limit', 'name', 'master_monthly', 'limit_cents', st.m_month, 'spent_cents', spent); END IF;
  PERFORM checkout_add_counter('bot:' || p_bot_id, 'day', p_day, p_amount, NULL);
  PERFORM checkout_add_counter('bot:' || p_bot_id, 'month', p_month, p_amount, NULL);

  -- 5. Funds: the balance the bot sees (the wallet row is locked last).
  SELECT available_cents - decoy_spent_cents - decoy_held_cents INTO available FROM wallets WHERE bot_id = p_bot_id FOR UPDATE;
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
  IF held THEN
    -- Drawn for every hold, real or decoy, so both take the same work; only a decoy uses it.
    SELECT delay_ms, outcome INTO d_delay, d_outcome
      FROM decoy_decision_sample(st.owner_id, prof.persona_delay_ms, prof.persona_sigma, prof.persona_deny, prof.persona_expire,
                                 p_window_seconds);
  END IF;

  INSERT INTO checkout_confirmations (id, bot_id, owner_id, card_id, profile_index, is_real, profile_window,
      merchant_name, merchant_url, item_name, category, task_id, amount_cents, status, created_at, expires_at,
      decide_at, decoy_outcome, decided_at, decided_by)
    VALUES (p_id, p_bot_id, st.owner_id, card.id, p_profile_index, is_real, prof.allowance_window,
      p_merchant_name, p_merchant_url, p_item_name, p_category, p_task_id, p_amount,
      CASE WHEN held THEN 'pending' ELSE 'approved' END, p_now,
      CASE WHEN held THEN p_now + make_interval(secs => p_window_seconds) END,
      CASE WHEN held AND NOT is_real THEN
        coalesce(p_now + make_interval(secs => d_delay / 1000.0), p_now + make_interval(secs => p_window_seconds)) END,
      CASE WHEN held AND NOT is_real THEN d_outcome END,
      CASE WHEN held THEN NULL ELSE p_now END,
      CASE WHEN held THEN NULL ELSE 'guardrails' END);

  -- Money rows for the real profile, decoy rows (same shape) for a decoy.
  INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at)
    VALUES (p_ledger_id, p_bot_id,
            CASE WHEN is_real THEN '' ELSE 'decoy_' END || CASE WHEN held THEN 'hold' ELSE 'purchase' END, p_id,
            CASE WHEN held THEN 'Held for owner approval' ELSE 'Purchase approved' END, p_now);
  INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_cents, created_at)
    VALUES (p_ledger_id, p_bot_id, CASE WHEN is_real THEN 'wallet_available' ELSE 'decoy_cover' END, -p_amount, p_now),
           (p_ledger_id, p_bot_id,
            CASE WHEN is_real THEN CASE WHEN held THEN 'wallet_held' ELSE 'merchant_settlement' END
                 ELSE CASE WHEN held THEN 'decoy_held' ELSE 'decoy_spent' END END, p_amount, p_now);
  IF NOT held THEN
    -- No NOTIFY here (see 0002): the caller notifies right after commit.
    INSERT INTO events (id, bot_id, type, body, created_at) VALUES (p_event_id, p_bot_id, 'purchase.approved', p_event_body, p_now);
  END IF;

  RETURN jsonb_build_object('ok', true, 'held', held, 'is_real', is_real, 'card_id', card.id, 'owner_id', st.owner_id,
    'secret_enc', card.secret_enc, 'profiles_enc', card.profiles_enc, 'missing_position', card.missing_position,
    'card_created_at', card.created_at, 'available_before', available, 'profile_window', prof.allowance_window);
END $$;
