-- One spending counter of a checkout, added with a conditional upsert: under READ COMMITTED the
-- WHERE is re-checked on the newest row version after waiting for its lock, so no interleaving
-- passes a limit. Returns -1 when added, otherwise what is already spent in the window (nothing
-- added). p_limit NULL: counted, never limiting. Used by checkout_attempt and src/x402/service.ts.
CREATE OR REPLACE FUNCTION checkout_add_counter(p_scope text, p_kind text, p_start timestamptz, p_amount bigint, p_limit bigint)
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
