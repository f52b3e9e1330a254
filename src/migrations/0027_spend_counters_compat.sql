-- Rolling deploys across 0026. Instances of the version before it read spend_counters (bot status,
-- owner budget figures), subtract released holds from it and add x402 payments through
-- checkout_add_counter; 0026 dropped both, so those instances failed until stopped. spend_counters
-- comes back as a view of spend_windows (one row per scope and kind of window it counts, the
-- current window only, as 0026 keeps), updatable for the subtraction the old release code makes;
-- checkout_add_counter comes back as a wrapper of spend_add (src/migrations/functions/). Nothing in
-- this version uses either.
CREATE VIEW spend_counters AS
  SELECT scope, 'day'::text AS window_kind, day_start AS window_start, day_cents AS spent_cents
    FROM spend_windows WHERE day_start IS NOT NULL
  UNION ALL
  SELECT scope, 'week', week_start, week_cents FROM spend_windows WHERE week_start IS NOT NULL
  UNION ALL
  SELECT scope, 'month', month_start, month_cents FROM spend_windows WHERE month_start IS NOT NULL;

-- The old release: UPDATE spend_counters SET spent_cents = greatest(spent_cents - n, 0) WHERE scope
-- = … AND window_kind = … AND window_start = … (the window the hold was taken in; a window that
-- has rolled over since is not matched, so nothing is subtracted from the new one).
CREATE FUNCTION spend_counters_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.scope IS DISTINCT FROM OLD.scope OR NEW.window_kind IS DISTINCT FROM OLD.window_kind
     OR NEW.window_start IS DISTINCT FROM OLD.window_start THEN
    RAISE EXCEPTION 'spend_counters: only spent_cents can be changed';
  END IF;
  IF OLD.window_kind = 'day' THEN
    UPDATE spend_windows SET day_cents = NEW.spent_cents WHERE scope = OLD.scope AND day_start = OLD.window_start;
  ELSIF OLD.window_kind = 'week' THEN
    UPDATE spend_windows SET week_cents = NEW.spent_cents WHERE scope = OLD.scope AND week_start = OLD.window_start;
  ELSE
    UPDATE spend_windows SET month_cents = NEW.spent_cents WHERE scope = OLD.scope AND month_start = OLD.window_start;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER spend_counters_update INSTEAD OF UPDATE ON spend_counters
  FOR EACH ROW EXECUTE FUNCTION spend_counters_update();
