-- Compatibility piece (docs/deploy.md "Compatibility pieces"): the card's chain under the name and
-- arguments it had before spend_run, for instances of the previous version during a rolling
-- deploy. It holds no chain of its own: it calls spend_run (src/migrations/functions/spend_run.sql,
-- the one guardrail chain of both rails) with the method 'card' and answers what spend_run answers
-- (the same jsonb and the same refusals as before). Nothing in this version calls it; it goes with
-- the migration docs/deploy.md names.
--
-- PL/pgSQL rather than SQL: a SQL function's body is checked at creation, and on a new database
-- this file runs before spend_run.sql (files run in name order).
CREATE OR REPLACE FUNCTION checkout_run(
  p_bot_id text, p_card_id text, p_profile_index integer, p_amount bigint, p_category text,
  p_id text, p_merchant_name text, p_merchant_url text, p_item_name text, p_task_id text,
  p_now timestamptz, p_day timestamptz, p_week timestamptz, p_month timestamptz,
  p_window_seconds integer, p_ledger_id text, p_event_id text, p_event_body text,
  p_rate_key text, p_rate_limit integer, p_idempotency_key text, p_request_hash text,
  p_low_balance_micros bigint
) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
  RETURN spend_run(p_method => 'card', p_bot_id => p_bot_id, p_card_id => p_card_id,
    p_profile_index => p_profile_index, p_amount => p_amount, p_category => p_category, p_id => p_id,
    p_merchant_name => p_merchant_name, p_merchant_url => p_merchant_url, p_item_name => p_item_name,
    p_task_id => p_task_id, p_now => p_now, p_day => p_day, p_week => p_week, p_month => p_month,
    p_window_seconds => p_window_seconds, p_ledger_id => p_ledger_id, p_event_id => p_event_id,
    p_event_body => p_event_body, p_rate_key => p_rate_key, p_rate_limit => p_rate_limit,
    p_idempotency_key => p_idempotency_key, p_request_hash => p_request_hash,
    p_low_balance_micros => p_low_balance_micros);
END $$;
