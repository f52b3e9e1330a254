-- For instances of the previous version during a rolling deploy: they call checkout_attempt inside
-- their transaction and expect a refusal as an answer ({"error": …}), which they then roll back.
-- checkout_run raises it instead; the exception block turns it back into the answer (the block's
-- savepoint has already undone what the call wrote). Nothing in this version calls it; it goes with
-- migration 0050 (docs/deploy.md, "Compatibility pieces").
CREATE OR REPLACE FUNCTION checkout_attempt(
  p_bot_id text, p_card_id text, p_profile_index integer, p_amount bigint, p_category text,
  p_id text, p_merchant_name text, p_merchant_url text, p_item_name text, p_task_id text,
  p_now timestamptz, p_day timestamptz, p_week timestamptz, p_month timestamptz,
  p_window_seconds integer, p_ledger_id text, p_event_id text, p_event_body text,
  p_rate_key text, p_rate_limit integer, p_idempotency_key text, p_request_hash text
) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
  RETURN checkout_run(p_bot_id, p_card_id, p_profile_index, p_amount, p_category, p_id, p_merchant_name,
    p_merchant_url, p_item_name, p_task_id, p_now, p_day, p_week, p_month, p_window_seconds, p_ledger_id,
    p_event_id, p_event_body, p_rate_key, p_rate_limit, p_idempotency_key, p_request_hash, NULL);
EXCEPTION WHEN SQLSTATE 'BP001' THEN
  RETURN SQLERRM::jsonb;
END $$;
