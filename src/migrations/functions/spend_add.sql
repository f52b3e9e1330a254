-- Adds a purchase to one scope's spending windows (table spend_windows, migration 0026) with one
-- conditional upsert: under READ COMMITTED the WHERE is re-checked on the newest row version after
-- waiting for its lock, so no interleaving passes a limit. Used by spend_run (both rails' guardrail
-- chain); src/spend/counters.ts subtracts released holds.
--
-- Each window is given by its start (the UTC day, ISO week or UTC month the purchase falls in) and
-- its limit: a NULL start leaves that window alone, a NULL limit counts without limiting. A stored
-- window older than the given start rolls over (its figure starts again at this purchase); a
-- stored window newer than the given start (an instance whose clock lags at midnight) is counted
-- into as the current one, which can only refuse earlier, never pass a limit.
--
-- Amounts and limits are micro-dollars (migration 0050).
--
-- Answers refused NULL when added; otherwise the first window, in the order day, week, month, whose
-- limit the purchase would pass ('day', 'week' or 'month') and what is spent in it (nothing added).
CREATE OR REPLACE FUNCTION spend_add(
  p_scope text, p_amount bigint,
  p_day timestamptz, p_day_limit bigint, p_week timestamptz, p_week_limit bigint,
  p_month timestamptz, p_month_limit bigint,
  OUT refused text, OUT spent bigint
) LANGUAGE plpgsql AS $$
DECLARE
  w spend_windows%ROWTYPE;
BEGIN
  IF (p_day_limit IS NULL OR p_amount <= p_day_limit) AND (p_week_limit IS NULL OR p_amount <= p_week_limit)
     AND (p_month_limit IS NULL OR p_amount <= p_month_limit) THEN
    INSERT INTO spend_windows AS c (scope, day_start, day_micros, week_start, week_micros, month_start, month_micros)
      VALUES (p_scope, p_day, CASE WHEN p_day IS NULL THEN 0 ELSE p_amount END,
              p_week, CASE WHEN p_week IS NULL THEN 0 ELSE p_amount END,
              p_month, CASE WHEN p_month IS NULL THEN 0 ELSE p_amount END)
      ON CONFLICT (scope) DO UPDATE SET
        day_start = CASE WHEN p_day IS NULL OR c.day_start >= p_day THEN c.day_start ELSE p_day END,
        day_micros = CASE WHEN p_day IS NULL THEN c.day_micros WHEN c.day_start >= p_day THEN c.day_micros + p_amount ELSE p_amount END,
        week_start = CASE WHEN p_week IS NULL OR c.week_start >= p_week THEN c.week_start ELSE p_week END,
        week_micros = CASE WHEN p_week IS NULL THEN c.week_micros WHEN c.week_start >= p_week THEN c.week_micros + p_amount ELSE p_amount END,
        month_start = CASE WHEN p_month IS NULL OR c.month_start >= p_month THEN c.month_start ELSE p_month END,
        month_micros = CASE WHEN p_month IS NULL THEN c.month_micros WHEN c.month_start >= p_month THEN c.month_micros + p_amount ELSE p_amount END
      WHERE (p_day_limit IS NULL OR CASE WHEN c.day_start >= p_day THEN c.day_micros ELSE 0 END + p_amount <= p_day_limit)
        AND (p_week_limit IS NULL OR CASE WHEN c.week_start >= p_week THEN c.week_micros ELSE 0 END + p_amount <= p_week_limit)
        AND (p_month_limit IS NULL OR CASE WHEN c.month_start >= p_month THEN c.month_micros ELSE 0 END + p_amount <= p_month_limit);
    IF FOUND THEN RETURN; END IF;
  END IF;
  -- Refused (after the upsert the row is locked, so this reads what decided).
  SELECT * INTO w FROM spend_windows WHERE scope = p_scope;
  spent := CASE WHEN w.day_start >= p_day THEN w.day_micros ELSE 0 END;
  IF p_day_limit IS NOT NULL AND spent + p_amount > p_day_limit THEN refused := 'day'; RETURN; END IF;
  spent := CASE WHEN w.week_start >= p_week THEN w.week_micros ELSE 0 END;
  IF p_week_limit IS NOT NULL AND spent + p_amount > p_week_limit THEN refused := 'week'; RETURN; END IF;
  spent := CASE WHEN w.month_start >= p_month THEN w.month_micros ELSE 0 END;
  refused := 'month';
END $$;
