-- Rolling-deploy compatibility (docs/deploy.md, "Compatibility pieces"): the INSTEAD OF UPDATE
-- trigger of the spend_counters view (migration 0027), for instances of the version before
-- migration 0026, which subtract a released hold with
--   UPDATE spend_counters SET spent_cents = greatest(spent_cents - n, 0) WHERE scope = … AND
--   window_kind = … AND window_start = …
-- (the window the hold was taken in; a window that has rolled over since is not matched, so
-- nothing is subtracted from the new one). Nothing in this version uses it. Goes with the view in
-- the release after 0.2 (docs/deploy.md). Defined first in migration 0027; this file is its one
-- definition since 0033.
CREATE OR REPLACE FUNCTION spend_counters_update() RETURNS trigger LANGUAGE plpgsql AS $$
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
