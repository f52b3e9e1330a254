-- Kept for instances of versions before migration 0026 during a rolling deploy (0027): their x402
-- payments add to one window of a scope through this call. It adds through spend_add, the same
-- conditional upsert this version uses (table spend_windows), and answers as it used to: -1 when
-- added, otherwise what is already spent in the window (nothing added). p_limit NULL: counted,
-- never limiting. Nothing in this version calls it; it goes with migration 0050 (docs/deploy.md,
-- "Compatibility pieces").
CREATE OR REPLACE FUNCTION checkout_add_counter(p_scope text, p_kind text, p_start timestamptz, p_amount bigint, p_limit bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  SELECT * INTO r FROM spend_add(p_scope, p_amount,
    CASE WHEN p_kind = 'day' THEN p_start END, CASE WHEN p_kind = 'day' THEN p_limit END,
    CASE WHEN p_kind = 'week' THEN p_start END, CASE WHEN p_kind = 'week' THEN p_limit END,
    CASE WHEN p_kind = 'month' THEN p_start END, CASE WHEN p_kind = 'month' THEN p_limit END);
  IF r.refused IS NULL THEN RETURN -1; END IF;
  RETURN r.spent;
END $$;
