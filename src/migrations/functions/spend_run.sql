-- One purchase on either rail, in one call: the one guardrail chain of the service (issue 30). The
-- payment method is the only thing that differs: p_method 'card' (a card profile: src/checkout/)
-- or 'partner_wallet' (an x402 payment signed with the partner wallet's key: src/x402/). The order
-- (docs/checkout.md, docs/x402.md):
--
--   the Idempotency-Key (a replay answers at once) → the bot's rate limit (p_rate_key: the rail's
--   own) → wallet status → the method's resolution and limits [card: card → card per-transaction →
--   card daily/monthly → profile allowance | partner wallet: rail status → network and asset →
--   the owner's pay-to and domain lists → x402 per-transaction → x402 daily/monthly] → master
--   limits (in the profile's world; an x402 payment is always real) → the bot's counter → funds
--   (the method's wallet row, locked last) → approval mode [card: the card and the profile rule,
--   a task's schedule | partner wallet: its own mode] → the rows: the confirmation (a card
--   purchase always, an x402 payment when held), the x402_payments row, the ledger rows, the
--   purchase.approved event (card purchases approved at once).
--
-- The triggers' work for its own rows, done here (migration 0055): the funds check is the UPDATE of
-- the method's wallet row, which adds what the purchase's two entries add (held or spent, so the
-- approval mode, which refuses nothing, is decided before it: the card's from the card and the
-- profile, the partner wallet's on its locked row); a card purchase's rows follow in one
-- statement (its confirmation, ledger transaction and entries, and its event with the webhook
-- delivery and queue rows), an x402 payment's in a few. From the counters' upsert (steps 4–5)
-- to the last row, the function runs with botpay.written_by = 'spend_run', for
-- which the tables' triggers (projection, balance check, delivery, announcements: 0055; the
-- wallet's and the bot counter's announcements: 0056) are not called; it announces the bot once
-- itself ('bot:<id>' on botpay_bot_state, and botpay_events for an event), the same for every
-- profile and mode. Every other writer's rows go through the triggers.
--
-- Called with named parameters from src/spend/run.ts (the one caller), through the rails' typed
-- interfaces src/checkout/attempt.ts and src/x402/service.ts. It replaced checkout_run (kept as a
-- wrapper of this function for the previous version's instances: checkout_run.sql) and the partner
-- wallet's chain in TypeScript.
--
-- What stays in TypeScript for the partner wallet, because it needs TypeScript: choosing the
-- requirement among the seller's offers (src/x402/requirements.ts), judging the resource's domain
-- against the owner's domain lists (domainMatches; given here as p_domain_refused, from the wallet
-- row read in the same transaction, and raised at its place in the chain) and signing the
-- EIP-3009 authorisation with the wallet key, after this call in the same transaction (the call
-- returns the encrypted key; the signature is written on the x402_payments row).
--
-- Refusals raise: SQLSTATE BP001 with the refusal ({"error": …}) as the message. The statement
-- fails, so whatever the call wrote before the rule that refused (the rate-limit hit, counters)
-- is undone with it, whether the call runs as a statement on its own (one round trip: committed
-- when it passes, nothing left when it refuses) or inside the caller's transaction (which the
-- caller then rolls back). The refusals and their codes are the ones each rail had before; the
-- refusal → error mapping is src/spend/refusals.ts (shared), src/checkout/service.ts (the card's
-- own) and src/x402/service.ts (the partner wallet's own).
--
-- p_low_balance_micros (cards): given (the call runs on its own), a purchase that would take the
-- visible balance from at or above it to below it raises BP002 instead of being written: the caller
-- writes the low-balance event (src/checkout/service.ts) and so runs the checkout again inside a
-- transaction, with NULL here. NULL for the partner wallet (it has no low-balance event).
--
-- Idempotency (docs/checkout.md), one mechanism for both rails: the key and the request's hash are
-- kept on the purchase's own row (a card's confirmation, migration 0023; an x402 payment's
-- x402_payments row, 0051). With a key, a transaction advisory lock on (bot, key) makes a
-- concurrent request with the same key wait until the first commits or rolls back; the lookup
-- after it then sees the committed row, which is answered ({"replay": …}: the caller rebuilds the
-- first answer from the row) before the rate limit, so a replay is never counted or refused. The
-- same key with another hash refuses idempotency_conflict. Keys are honoured for 24 hours: an
-- older row gives its key up.
--
-- Amounts are micro-dollars (migration 0050): p_amount, the limits, the counters and the refusal's
-- limit_micros / spent_micros / balance_micros. A card purchase is whole cents at the API; the
-- caller converts (src/platform/money.ts). An x402 payment is the requirement's atomic USDC amount
-- (6 decimals: one atomic unit is one micro-dollar).
--
-- Locks, in the one global order, for both methods: the key's advisory lock, the bot's rate-limit
-- row, then counter rows card (the profile's card row, which also holds its allowance: migration
-- 0059) or x402:<bot> (partner wallet) → owner → bot, then the method's wallet row (wallets or
-- x402_wallets) last. The three counter rows (spend_windows: each scope's day, week and month side
-- by side) are added to by one conditional upsert, in that order, each row under its own limits:
-- the rule's one definition (spend_add, the same upsert for one scope, went with migration 0061).
--
-- Split knowledge (docs/security.md), cards:
-- - every profile is checked against the visible balance (available − decoy reserve) and counts in
--   the bot's own counters, so balance and spend figures move alike;
-- - every profile is checked against the master guardrails in its own world (the owner's real
--   spending, with this card's real-profile spending replaced by this profile's); only the real
--   profile spends the owner's real budget;
-- - a decoy writes decoy ledger rows (decoy_cover → decoy_spent / decoy_held) where a real
--   purchase writes money rows;
-- - a held purchase is the same object on every profile: decided by the owner in the approvals
--   inbox (which does not show the profile) or expired, never by the service.
--
-- Kept in step with it: src/checkout/guardrails.ts counterSpecs and src/x402/service.ts
-- x402CounterSpecs (the scopes released on deny and expiry), src/events/outbox.ts (the event row;
-- the caller builds the body and notifies after commit), src/wallet/ledger.ts (the x402 moves'
-- kinds and descriptions).
--
-- p_announce: true (the default), the call announces what it changed with botpay_notify ('bot:<id>'
-- on botpay_bot_state, and the bot on botpay_events for a card purchase approved at once); false,
-- the caller does, after the commit (src/spend/run.ts spendAlone: Db.announce), the same keys. On
-- PostgreSQL each botpay_notify is a NOTICE that the server sends the client at once: two socket
-- writes, and two wake-ups of the service, per approved checkout.
--
-- p_payment (partner wallet only): the x402 payment as the service chose it: network (the
-- service's configured one), asset, pay_to, resource_url, resource_domain, description,
-- amount_micro (the atomic amount, as text), requirements (what is stored and signed later),
-- x402_version, domain_check. p_domain_refused: the domain lists' verdict on resource_domain.
CREATE OR REPLACE FUNCTION spend_run(
  p_method text, p_bot_id text, p_card_id text, p_profile_index integer, p_amount bigint, p_category text,
  p_id text, p_merchant_name text, p_merchant_url text, p_item_name text, p_task_id text,
  p_now timestamptz, p_day timestamptz, p_week timestamptz, p_month timestamptz,
  p_window_seconds integer, p_ledger_id text, p_event_id text, p_event_body text,
  p_rate_key text, p_rate_limit integer, p_idempotency_key text, p_request_hash text,
  p_low_balance_micros bigint, p_payment jsonb DEFAULT NULL, p_domain_refused boolean DEFAULT NULL,
  p_announce boolean DEFAULT true
) RETURNS jsonb LANGUAGE plpgsql
-- Planned once per connection, not at every call, and always through indexes, whatever the
-- statistics said when the plans were made (why: "Generic plans" and "Index plans" in
-- src/platform/db/migrate.ts).
SET plan_cache_mode = force_generic_plan SET jit = off SET enable_seqscan = off AS $$
DECLARE
  by_card boolean := p_method = 'card';
  st record;
  card cards%ROWTYPE;
  prof card_profiles%ROWTYPE;
  xw x402_wallets%ROWTYPE;
  rail_status text;
  n integer;
  is_real boolean := true;
  card_scope text;
  profile_window text := 'month';
  world_day bigint;
  world_month bigint;
  available bigint;
  automatic boolean;
  held boolean;
  prior record;
  retry integer;
  rail_scope text;
  rail_day_limit bigint;
  rail_week timestamptz;
  rail_week_limit bigint;
  rail_month_limit bigint;
  rail_ok boolean;
  owner_scope text;
  owner_day_limit bigint;
  owner_month_limit bigint;
  owner_ok boolean;
  spent_day bigint;
  spent_week bigint;
  spent_month bigint;
  marker text;
BEGIN
  IF p_method IS NULL OR p_method NOT IN ('card', 'partner_wallet') THEN
    RAISE EXCEPTION 'spend_run: unknown payment method %', p_method;
  END IF;

  -- 0. Idempotency key, then the rate limit.
  IF p_idempotency_key IS NOT NULL AND NOT by_card THEN
    -- The partner wallet's key on its payment row (migration 0051): the same lock, lookup and
    -- 24 hours; the caller rebuilds the answer from the row.
    PERFORM pg_advisory_xact_lock(hashtextextended(p_bot_id || '/' || p_idempotency_key, 0));
    SELECT x.id, x.request_hash, x.created_at INTO prior
      FROM x402_payments x WHERE x.bot_id = p_bot_id AND x.idempotency_key = p_idempotency_key;
    IF FOUND AND prior.created_at > p_now - interval '24 hours' THEN
      IF prior.request_hash IS DISTINCT FROM p_request_hash THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'idempotency_conflict'); END IF;
      RETURN jsonb_build_object('replay', jsonb_build_object('payment_id', prior.id));
    END IF;
    IF FOUND THEN
      UPDATE x402_payments SET idempotency_key = NULL WHERE id = prior.id;
    END IF;
  ELSIF p_idempotency_key IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_bot_id || '/' || p_idempotency_key, 0));
    SELECT k.id, k.request_hash, k.created_at, k.profile_index, k.is_real, k.merchant_name, k.amount_micros,
           k.expires_at, c.id AS card_id, c.secret_enc, c.profiles_enc, c.missing_position, c.created_at AS card_created_at
      INTO prior
      FROM checkout_confirmations k JOIN cards c ON c.id = k.card_id
     WHERE k.bot_id = p_bot_id AND k.idempotency_key = p_idempotency_key;
    IF FOUND AND prior.created_at > p_now - interval '24 hours' THEN
      IF prior.request_hash IS DISTINCT FROM p_request_hash THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'idempotency_conflict'); END IF;
      RETURN jsonb_build_object('replay', jsonb_build_object('held', prior.expires_at IS NOT NULL, 'is_real', prior.is_real,
        'confirmation_id', prior.id, 'profile_index', prior.profile_index, 'merchant_name', prior.merchant_name,
        'amount_micros', prior.amount_micros, 'expires_at', prior.expires_at, 'card_id', prior.card_id,
        'secret_enc', prior.secret_enc, 'profiles_enc', prior.profiles_enc, 'missing_position', prior.missing_position,
        'card_created_at', prior.card_created_at));
    END IF;
    IF FOUND THEN
      -- Older than 24 hours: the key is free again (the rare write of this step).
      UPDATE checkout_confirmations SET idempotency_key = NULL WHERE id = prior.id;
    END IF;
  END IF;
  retry := rate_limit_consume(p_rate_key, p_rate_limit, 3600, p_now);
  IF retry <> 0 THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'rate_limited', 'retry_after_seconds', retry); END IF;

  -- 1. Wallet status.
  SELECT b.owner_id, w.status, o.master_per_transaction_micros AS m_tx, o.master_daily_micros AS m_day,
         o.master_monthly_micros AS m_month
    INTO st FROM bots b JOIN wallets w ON w.bot_id = b.id LEFT JOIN owners o ON o.id = b.owner_id
   WHERE b.id = p_bot_id;
  IF st.owner_id IS NULL OR st.status = 'pending' THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'wallet_not_active'); END IF;
  IF st.status = 'frozen' THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'wallet_frozen'); END IF;

  IF by_card THEN
    -- 2. Card: the card and the profile.
    IF p_card_id IS NOT NULL THEN
      SELECT * INTO card FROM cards WHERE id = p_card_id AND bot_id = p_bot_id;
      IF NOT FOUND THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'card_not_found'); END IF;
      IF card.status <> 'active' THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'card_not_active'); END IF;
    ELSE
      -- The bot's one active card, in one statement; none or several: counted for the refusal.
      SELECT * INTO card FROM cards c WHERE c.bot_id = p_bot_id AND c.status = 'active'
         AND NOT EXISTS (SELECT 1 FROM cards x WHERE x.bot_id = p_bot_id AND x.status = 'active' AND x.id <> c.id);
      IF NOT FOUND THEN
        SELECT count(*) INTO n FROM (SELECT 1 FROM cards WHERE bot_id = p_bot_id AND status = 'active' LIMIT 2) x;
        IF n > 1 THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'card_id_required'); END IF;
        RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'card_not_active');
      END IF;
    END IF;
    SELECT * INTO prof FROM card_profiles WHERE card_id = card.id AND profile_index = p_profile_index;
    IF NOT FOUND OR NOT prof.enabled THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'invalid_profile'); END IF;
    is_real := card.real_profile_index = p_profile_index;
    profile_window := prof.allowance_window;

    -- 3–4. Card guardrails and the profile's allowance, in one row of the profile's own world:
    -- 'card:<id>' for the real profile (which no decoy reaches), 'card:<id>:p<index>' for a decoy.
    -- The row counts exactly this profile's purchases on this card, as the allowance's own row did
    -- until migration 0059 ('profile:<card>:<index>'), so one upsert checks both: the day and month
    -- windows carry the card's limits, tightened by the allowance when the allowance's window is the
    -- day or the month; a weekly allowance (the default) takes the row's week window.
    IF p_amount > card.per_transaction_micros THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'card_per_transaction', 'limit_micros', card.per_transaction_micros);
    END IF;
    card_scope := CASE WHEN is_real THEN 'card:' || card.id ELSE 'card:' || card.id || ':p' || p_profile_index END;
    rail_scope := card_scope;
    rail_day_limit := CASE WHEN prof.allowance_window = 'day' THEN least(card.daily_micros, prof.allowance_micros) ELSE card.daily_micros END;
    rail_week := CASE WHEN prof.allowance_window = 'week' THEN p_week END;
    rail_week_limit := CASE WHEN prof.allowance_window = 'week' THEN prof.allowance_micros END;
    rail_month_limit := CASE WHEN prof.allowance_window = 'month' THEN least(card.monthly_micros, prof.allowance_micros) ELSE card.monthly_micros END;
  ELSE
    -- 2. Partner wallet: the rail, its network and asset.
    SELECT r.status INTO rail_status FROM rails r WHERE r.bot_id = p_bot_id AND r.rail_key = 'partner_wallet';
    SELECT * INTO xw FROM x402_wallets WHERE bot_id = p_bot_id;
    IF rail_status IS DISTINCT FROM 'active' OR xw.bot_id IS NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'rail_not_active');
    END IF;
    IF xw.network <> p_payment->>'network' OR xw.asset <> p_payment->>'asset' THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'rail_network', 'network', xw.network, 'configured', p_payment->>'network');
    END IF;

    -- 3. The owner's lists: pay-to (what is signed) in every mode; the domain lists judged the
    -- domain the service knows (domain_check): a 'claimed' one under lists means the lists were
    -- set after the caller read them.
    IF xw.deny_pay_to ? (p_payment->>'pay_to')
       OR (jsonb_array_length(xw.allow_pay_to) > 0 AND NOT xw.allow_pay_to ? (p_payment->>'pay_to')) THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'destination_not_allowed', 'destination', p_payment->>'pay_to');
    END IF;
    IF p_payment->>'domain_check' = 'claimed' AND jsonb_array_length(xw.allow_domains) + jsonb_array_length(xw.deny_domains) > 0 THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'destination_lists_changed');
    END IF;
    IF p_domain_refused THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'destination_not_allowed', 'destination', p_payment->>'resource_domain');
    END IF;

    -- 4. The rail's limits ('x402:<bot>').
    IF p_amount > xw.per_transaction_micros THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'x402_per_transaction', 'limit_micros', xw.per_transaction_micros);
    END IF;
    rail_scope := 'x402:' || p_bot_id;
    rail_day_limit := xw.daily_micros;
    rail_month_limit := xw.monthly_micros;
  END IF;

  -- 4–5. The counters. The rail's row ('card:…' or 'x402:<bot>'), the owner's and the bot's in one conditional
  -- upsert, locked in that order: each row is added to when its own limits hold (the rail's: the
  -- method's day, week and month limits; the owner's: the master day and month for a real purchase,
  -- none for a decoy's memo row; the bot's: none). An amount above a limit on its own refuses
  -- before it (an insert would not be checked); the owner's row is then left out.
  rail_ok := (rail_day_limit IS NULL OR p_amount <= rail_day_limit) AND (rail_week_limit IS NULL OR p_amount <= rail_week_limit)
             AND (rail_month_limit IS NULL OR p_amount <= rail_month_limit);
  IF rail_ok THEN
    owner_scope := 'owner:' || st.owner_id || CASE WHEN is_real THEN '' ELSE ':decoy' END;
    owner_day_limit := CASE WHEN is_real THEN st.m_day END;
    owner_month_limit := CASE WHEN is_real THEN st.m_month END;
    -- From here on the rows are spend_run's own (migrations 0055, 0056): botpay.written_by =
    -- 'spend_run' until the last write, so that their tables' triggers are not called (the bot's
    -- counter row first); the one announcement they made three times over is made once, after the
    -- writes. A refusal below fails the statement, and the setting goes with it.
    marker := set_config('botpay.written_by', 'spend_run', true);
    WITH up AS (
      INSERT INTO spend_windows AS c (scope, day_start, day_micros, week_start, week_micros, month_start, month_micros)
      SELECT v.scope, v.day_start, CASE WHEN v.day_start IS NULL THEN 0 ELSE p_amount END,
             v.week_start, CASE WHEN v.week_start IS NULL THEN 0 ELSE p_amount END, p_month, p_amount
        FROM (VALUES (1, rail_scope, p_day, rail_week), (2, owner_scope, p_day, NULL::timestamptz),
                     (3, 'bot:' || p_bot_id, NULL::timestamptz, NULL::timestamptz)) AS v(ord, scope, day_start, week_start)
       WHERE v.ord <> 2 OR owner_day_limit IS NULL OR (p_amount <= owner_day_limit AND p_amount <= owner_month_limit)
       ORDER BY v.ord
      ON CONFLICT (scope) DO UPDATE SET
        day_start = CASE WHEN excluded.day_start IS NULL OR c.day_start >= excluded.day_start THEN c.day_start ELSE excluded.day_start END,
        day_micros = CASE WHEN excluded.day_start IS NULL THEN c.day_micros WHEN c.day_start >= excluded.day_start THEN c.day_micros + p_amount ELSE p_amount END,
        week_start = CASE WHEN excluded.week_start IS NULL OR c.week_start >= excluded.week_start THEN c.week_start ELSE excluded.week_start END,
        week_micros = CASE WHEN excluded.week_start IS NULL THEN c.week_micros WHEN c.week_start >= excluded.week_start THEN c.week_micros + p_amount ELSE p_amount END,
        month_start = CASE WHEN c.month_start >= p_month THEN c.month_start ELSE p_month END,
        month_micros = CASE WHEN c.month_start >= p_month THEN c.month_micros + p_amount ELSE p_amount END
      WHERE CASE c.scope
        WHEN rail_scope THEN
          (rail_day_limit IS NULL OR CASE WHEN c.day_start >= p_day THEN c.day_micros ELSE 0 END + p_amount <= rail_day_limit)
          AND (rail_week_limit IS NULL OR CASE WHEN c.week_start >= p_week THEN c.week_micros ELSE 0 END + p_amount <= rail_week_limit)
          AND (rail_month_limit IS NULL OR CASE WHEN c.month_start >= p_month THEN c.month_micros ELSE 0 END + p_amount <= rail_month_limit)
        WHEN owner_scope THEN
          (owner_day_limit IS NULL OR CASE WHEN c.day_start >= p_day THEN c.day_micros ELSE 0 END + p_amount <= owner_day_limit)
          AND (owner_month_limit IS NULL OR CASE WHEN c.month_start >= p_month THEN c.month_micros ELSE 0 END + p_amount <= owner_month_limit)
        ELSE true END
      RETURNING c.scope
    )
    SELECT coalesce(bool_or(up.scope = rail_scope), false), coalesce(bool_or(up.scope = owner_scope), false)
      INTO rail_ok, owner_ok FROM up;
  END IF;
  IF NOT rail_ok THEN
    -- Which limit refused, in the chain's order (read from the row, which the upsert left locked;
    -- no row: nothing spent yet).
    SELECT CASE WHEN w.day_start >= p_day THEN w.day_micros END,
           CASE WHEN w.week_start >= p_week THEN w.week_micros END,
           CASE WHEN w.month_start >= p_month THEN w.month_micros END
      INTO spent_day, spent_week, spent_month FROM spend_windows w WHERE w.scope = rail_scope;
    spent_day := coalesce(spent_day, 0);
    spent_week := coalesce(spent_week, 0);
    spent_month := coalesce(spent_month, 0);
    IF NOT by_card THEN
      IF spent_day + p_amount > xw.daily_micros THEN
        RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'x402_daily', 'limit_micros', xw.daily_micros, 'spent_micros', spent_day);
      END IF;
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'x402_monthly', 'limit_micros', xw.monthly_micros, 'spent_micros', spent_month);
    END IF;
    -- A card: its day, its month, then the profile's allowance.
    IF spent_day + p_amount > card.daily_micros THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'card_daily', 'limit_micros', card.daily_micros, 'spent_micros', spent_day);
    END IF;
    IF spent_month + p_amount > card.monthly_micros THEN
      RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'card_monthly', 'limit_micros', card.monthly_micros, 'spent_micros', spent_month);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'profile_allowance', 'limit_micros', prof.allowance_micros,
      'spent_micros', CASE prof.allowance_window WHEN 'day' THEN spent_day WHEN 'week' THEN spent_week ELSE spent_month END,
      'window', prof.allowance_window);
  END IF;

  -- 5. Master guardrails, checked for every purchase in its own world: the owner's spending with
  -- this card's real-profile spending replaced by this profile's (for the real profile and an x402
  -- payment, simply the owner's spending), read after the upsert, which holds this purchase in the
  -- profile's card row and, for a real purchase that the owner's row took, in the owner's. A real
  -- purchase's authoritative check under concurrency is the owner row's condition (owner_ok); a
  -- decoy's counts in a memo row of the owner's ('owner:<id>:decoy', never read): the same
  -- statements either way, so the same time.
  IF p_amount > st.m_tx THEN
    RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'master_per_transaction', 'limit_micros', st.m_tx);
  END IF;
  SELECT coalesce(sum(w.sign * CASE WHEN w.day_start >= p_day THEN w.day_micros ELSE 0 END), 0),
         coalesce(sum(w.sign * CASE WHEN w.month_start >= p_month THEN w.month_micros ELSE 0 END), 0)
    INTO world_day, world_month
    FROM (SELECT c.day_start, c.day_micros, c.month_start, c.month_micros,
                 CASE WHEN c.scope = 'card:' || card.id THEN CASE WHEN is_real THEN 0 ELSE -1 END ELSE 1 END AS sign
            FROM spend_windows c
           WHERE c.scope IN ('owner:' || st.owner_id, 'card:' || card.id, card_scope)) w;
  IF owner_ok OR NOT is_real THEN
    world_day := world_day - p_amount;
    world_month := world_month - p_amount;
  END IF;
  IF world_day + p_amount > st.m_day THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'master_daily', 'limit_micros', st.m_day, 'spent_micros', world_day); END IF;
  IF world_month + p_amount > st.m_month OR NOT owner_ok THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'limit', 'name', 'master_monthly', 'limit_micros', st.m_month, 'spent_micros', world_month); END IF;

  -- 6. Approval mode (decided before the funds, which refuse or write the wallet row with the
  -- purchase held or spent; it refuses nothing itself).
  IF by_card THEN
    -- The card decides; the profile rule can only make it stricter.
    automatic := CASE card.approval_mode
      WHEN 'auto_approve_under_threshold' THEN p_amount < card.approval_threshold_micros
      WHEN 'auto_approve_by_category' THEN p_category IS NOT NULL AND card.approved_categories ? lower(p_category)
      ELSE false END;
    IF prof.approval_rule = 'ask_for_everything' THEN automatic := false; END IF;
    IF prof.approval_rule = 'auto_approve_under_threshold' THEN
      automatic := automatic AND p_amount < prof.approval_threshold_micros;
    END IF;
    -- A purchase for a task is approved by its schedule (the owner's or a shadow's alike): the owner
    -- approved the schedule. The caller checks the task in the same transaction (src/checkout/taskLink.ts).
    IF p_task_id IS NOT NULL THEN automatic := true; END IF;
    held := NOT automatic;
  END IF;

  -- 7. Funds: the balance the bot sees on the method's wallet (its row locked last). A card
  -- purchase's wallet row is written here, with the projection of the ledger entries below (step 8:
  -- the same sums ledger_apply_entry would add, so wallets = ledger): the visible balance drops by
  -- the amount whatever the profile and the mode — the real profile moves wallet_available (to
  -- wallet_held when held), a decoy adds to decoy_spent or decoy_held —, so a decoy writes the row
  -- with the same statement as the real profile (docs/security.md). The condition is the funds
  -- check; a refused one reads the balance under the lock for its refusal (it may have grown
  -- meanwhile: then the update is made under that lock).
  IF by_card THEN
    LOOP
      UPDATE wallets
         SET available_micros = available_micros - CASE WHEN is_real THEN p_amount ELSE 0 END,
             held_micros = held_micros + CASE WHEN is_real AND held THEN p_amount ELSE 0 END,
             decoy_spent_micros = decoy_spent_micros + CASE WHEN NOT is_real AND NOT held THEN p_amount ELSE 0 END,
             decoy_held_micros = decoy_held_micros + CASE WHEN NOT is_real AND held THEN p_amount ELSE 0 END,
             updated_at = p_now
       WHERE bot_id = p_bot_id AND available_micros - decoy_spent_micros - decoy_held_micros >= p_amount
       RETURNING available_micros - decoy_spent_micros - decoy_held_micros + p_amount INTO available;
      EXIT WHEN FOUND;
      SELECT available_micros - decoy_spent_micros - decoy_held_micros INTO available FROM wallets WHERE bot_id = p_bot_id FOR UPDATE;
      -- No row (gone since step 1): refused, never retried (the loop would not end).
      IF available IS NULL THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'wallet_not_active'); END IF;
      IF available < p_amount THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'insufficient_funds', 'balance_micros', available); END IF;
    END LOOP;
  ELSE
    -- The x402 wallet decides its mode on its locked row: held or authorised, written at once.
    LOOP
      UPDATE x402_wallets
         SET available_micros = available_micros - p_amount,
             held_micros = held_micros + CASE WHEN approval_mode = 'auto_approve_under_threshold'
                                               AND p_amount < approval_threshold_micros THEN 0 ELSE p_amount END,
             authorized_micros = authorized_micros + CASE WHEN approval_mode = 'auto_approve_under_threshold'
                                                          AND p_amount < approval_threshold_micros THEN p_amount ELSE 0 END,
             updated_at = p_now
       WHERE bot_id = p_bot_id AND available_micros >= p_amount
       RETURNING * INTO xw;
      EXIT WHEN FOUND;
      SELECT available_micros INTO available FROM x402_wallets WHERE bot_id = p_bot_id FOR UPDATE;
      -- No row (gone since step 1): refused, never retried (the loop would not end).
      IF available IS NULL THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'rail_not_active'); END IF;
      IF available < p_amount THEN RAISE EXCEPTION USING ERRCODE = 'BP001', MESSAGE = jsonb_build_object('error', 'insufficient_funds', 'balance_micros', available); END IF;
    END LOOP;
    available := xw.available_micros + p_amount;
    automatic := xw.approval_mode = 'auto_approve_under_threshold' AND p_amount < xw.approval_threshold_micros;
    held := NOT automatic;
  END IF;
  IF available >= p_low_balance_micros AND available - p_amount < p_low_balance_micros THEN
    RAISE EXCEPTION USING ERRCODE = 'BP002', MESSAGE = 'spend_run: the balance crosses the low mark; run it in a transaction';
  END IF;

  -- 8. The rows. An x402 payment's own row comes first (pending until signed: the caller signs
  -- after this call and sets it authorized).
  IF NOT by_card THEN
    INSERT INTO x402_payments (id, bot_id, owner_id, resource_url, resource_domain, description, network, asset,
        pay_from, pay_to, amount_micro, amount_micros, requirements, status, created_at, x402_version, domain_check,
        idempotency_key, request_hash)
      VALUES (p_id, p_bot_id, st.owner_id, p_payment->>'resource_url', p_payment->>'resource_domain',
        p_payment->>'description', xw.network, xw.asset, xw.address, p_payment->>'pay_to',
        (p_payment->>'amount_micro')::numeric, p_amount, p_payment->'requirements', 'pending', p_now,
        (p_payment->>'x402_version')::smallint, p_payment->>'domain_check', p_idempotency_key,
        CASE WHEN p_idempotency_key IS NOT NULL THEN p_request_hash END);
  END IF;

  IF by_card THEN
    -- A card purchase's rows in one statement: the confirmation; the ledger transaction and its two
    -- entries, money rows for the real profile, decoy rows (same shape) for a decoy; and, approved
    -- at once, the purchase.approved event with its webhook delivery and queue row. Sibling
    -- inserts of one statement: the foreign keys are checked at its end, when all are there.
    --
    -- The entries are projected on the wallet row at step 7, and balanced by construction (one
    -- amount, both signs, one statement). The statement runs with botpay.written_by = 'spend_run',
    -- for which neither ledger_entries_apply nor ledger_entries_balanced is called, nor the events'
    -- insert triggers (migration 0055): the event's rows are the ones webhook_delivery_for_event.sql
    -- writes (kept in step with it: test/spend/ownRows.test.ts compares both paths' rows), and its
    -- two announcements are events_wake's and events_state_insert's. The setting is cleared after
    -- the statement, so any later rows of the caller's transaction go through the triggers as every
    -- other writer's. No NOTIFY here (see 0002): botpay_notify leaves that to the caller, right
    -- after commit.
    WITH k AS (
      INSERT INTO checkout_confirmations (id, bot_id, owner_id, card_id, profile_index, is_real, profile_window,
          merchant_name, merchant_url, item_name, category, task_id, amount_micros, status, created_at, expires_at,
          decided_at, decided_by, idempotency_key, request_hash, rail)
        VALUES (p_id, p_bot_id, st.owner_id, card.id, p_profile_index, is_real, profile_window,
          p_merchant_name, p_merchant_url, p_item_name, p_category, p_task_id, p_amount,
          CASE WHEN held THEN 'pending' ELSE 'approved' END, p_now,
          CASE WHEN held THEN p_now + make_interval(secs => p_window_seconds) END,
          CASE WHEN held THEN NULL ELSE p_now END,
          CASE WHEN held THEN NULL ELSE 'guardrails' END, p_idempotency_key,
          CASE WHEN p_idempotency_key IS NOT NULL THEN p_request_hash END, 'card_wallet')
    ), t AS (
      INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at)
        VALUES (p_ledger_id, p_bot_id,
                CASE WHEN is_real THEN '' ELSE 'decoy_' END || CASE WHEN held THEN 'hold' ELSE 'purchase' END, p_id,
                CASE WHEN held THEN 'Held for owner approval' ELSE 'Purchase approved' END, p_now)
    ), en AS (
      INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_micros, created_at)
        VALUES (p_ledger_id, p_bot_id, CASE WHEN is_real THEN 'wallet_available' ELSE 'decoy_cover' END, -p_amount, p_now),
               (p_ledger_id, p_bot_id,
                CASE WHEN is_real THEN CASE WHEN held THEN 'wallet_held' ELSE 'merchant_settlement' END
                     ELSE CASE WHEN held THEN 'decoy_held' ELSE 'decoy_spent' END END, p_amount, p_now)
    ), e AS (
      INSERT INTO events (id, bot_id, type, body, created_at)
        SELECT p_event_id, p_bot_id, 'purchase.approved', p_event_body, p_now WHERE NOT held
        RETURNING seq
    ), d AS (
      INSERT INTO webhook_deliveries (id, event_id, bot_id, event_type, next_attempt_at, created_at, seq)
        SELECT 'whd_' || substr(p_event_id, position('_' in p_event_id) + 1), p_event_id, p_bot_id, 'purchase.approved', p_now, p_now, e.seq FROM e
    )
    INSERT INTO webhook_queue (delivery_id, event_id, bot_id, seq, due_at)
      SELECT 'whd_' || substr(p_event_id, position('_' in p_event_id) + 1), p_event_id, p_bot_id, e.seq, p_now FROM e;
    IF p_announce AND NOT held THEN PERFORM botpay_notify('botpay_events', p_bot_id); END IF;
    marker := set_config('botpay.written_by', '', true);
    IF p_announce THEN PERFORM botpay_notify('botpay_bot_state', 'bot:' || p_bot_id); END IF;
  ELSE
    -- The confirmation of a held x402 payment (the same inbox, mail, approve / deny / expire paths
    -- as a card purchase's: src/spend/holds.ts).
    IF held THEN
      INSERT INTO checkout_confirmations (id, bot_id, owner_id, card_id, profile_index, is_real, profile_window,
          merchant_name, merchant_url, item_name, category, task_id, amount_micros, status, created_at, expires_at,
          decided_at, decided_by, idempotency_key, request_hash, rail)
        VALUES (p_id, p_bot_id, st.owner_id, NULL, p_profile_index, true, profile_window,
          p_merchant_name, p_merchant_url, p_item_name, p_category, p_task_id, p_amount, 'pending', p_now,
          p_now + make_interval(secs => p_window_seconds), NULL, NULL, NULL, NULL, 'partner_wallet');
    END IF;
    -- The x402 moves (src/wallet/ledger.ts x402Moves hold / payment): x402_available → x402_held or
    -- x402_authorized. purchase.approved waits until the seller took the payment (src/x402/service.ts
    -- announceApproved), or the owner's approval.
    INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at)
      VALUES (p_ledger_id, p_bot_id, CASE WHEN held THEN 'x402_hold' ELSE 'x402_payment' END, p_id,
              CASE WHEN held THEN 'x402 payment held for owner approval' ELSE 'x402 payment authorised' END, p_now);
    -- Projected at step 7, like a card purchase's entries.
    INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_micros, created_at)
      VALUES (p_ledger_id, p_bot_id, 'x402_available', -p_amount, p_now),
             (p_ledger_id, p_bot_id, CASE WHEN held THEN 'x402_held' ELSE 'x402_authorized' END, p_amount, p_now);
    marker := set_config('botpay.written_by', '', true);
    IF p_announce THEN PERFORM botpay_notify('botpay_bot_state', 'bot:' || p_bot_id); END IF;
    RETURN jsonb_build_object('ok', true, 'held', held, 'is_real', true, 'owner_id', st.owner_id,
      'key_enc', xw.key_enc, 'available_before', available,
      'expires_at', CASE WHEN held THEN p_now + make_interval(secs => p_window_seconds) END);
  END IF;

  RETURN jsonb_build_object('ok', true, 'held', held, 'is_real', is_real, 'card_id', card.id, 'owner_id', st.owner_id,
    'secret_enc', card.secret_enc, 'profiles_enc', card.profiles_enc, 'missing_position', card.missing_position,
    'card_created_at', card.created_at, 'available_before', available, 'profile_window', prof.allowance_window);
END $$;
