-- Spending counters: one row per scope instead of one per scope and window. A checkout counted
-- its card's day and month, the owner's day and month (or the decoy memo's), the profile's
-- allowance window and the bot's month in six spend_counters rows, each a conditional upsert, a
-- row lock held until COMMIT and a new row version. A scope's windows now sit side by side in one
-- spend_windows row (day, ISO week and month: the start of the window each figure belongs to and
-- what was spent in it), added in one conditional upsert that also rolls a window over when a new
-- one began (src/migrations/functions/spend_add.sql): four upserts per checkout (card, profile,
-- owner, bot), each scope's windows checked against their limits at once under one row lock.
--
-- Only the newest window of each kind is kept, the one the figures and limits read; past windows
-- were never read. A window start of NULL: the scope does not count that kind of window.
-- fillfactor 50: every checkout rewrites these rows, and room on the page keeps the rewrites HOT.
CREATE TABLE spend_windows (
  scope text PRIMARY KEY,
  day_start timestamptz,
  day_cents bigint NOT NULL DEFAULT 0,
  week_start timestamptz,
  week_cents bigint NOT NULL DEFAULT 0,
  month_start timestamptz,
  month_cents bigint NOT NULL DEFAULT 0
) WITH (fillfactor = 50);

INSERT INTO spend_windows (scope, day_start, day_cents, week_start, week_cents, month_start, month_cents)
SELECT scope,
       max(window_start) FILTER (WHERE window_kind = 'day'), coalesce(sum(spent_cents) FILTER (WHERE window_kind = 'day'), 0),
       max(window_start) FILTER (WHERE window_kind = 'week'), coalesce(sum(spent_cents) FILTER (WHERE window_kind = 'week'), 0),
       max(window_start) FILTER (WHERE window_kind = 'month'), coalesce(sum(spent_cents) FILTER (WHERE window_kind = 'month'), 0)
  FROM (SELECT DISTINCT ON (scope, window_kind) scope, window_kind, window_start, spent_cents
          FROM spend_counters ORDER BY scope, window_kind, window_start DESC) newest
 GROUP BY scope;

-- The bot's own row announces its changes (the month figure a status shows), as 0024 did for
-- spend_counters: only 'bot:<id>', so a real purchase and a decoy announce the same keys.
CREATE OR REPLACE FUNCTION notify_bot_state() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
  key text;
BEGIN
  IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
  IF TG_TABLE_NAME = 'bots' THEN key := 'bot:' || r.id;
  ELSIF TG_TABLE_NAME = 'owners' THEN key := 'owner:' || r.id;
  ELSIF TG_TABLE_NAME = 'spend_windows' THEN key := r.scope;
  ELSE key := 'bot:' || r.bot_id;
  END IF;
  IF key LIKE 'bot:%' OR key LIKE 'owner:%' THEN
    PERFORM botpay_notify('botpay_bot_state', key);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER spend_windows_state AFTER INSERT OR UPDATE ON spend_windows
  FOR EACH ROW WHEN (NEW.scope LIKE 'bot:%') EXECUTE FUNCTION notify_bot_state();

DROP TABLE spend_counters;
-- Replaced by spend_add (src/migrations/functions/spend_add.sql).
DROP FUNCTION IF EXISTS checkout_add_counter(text, text, timestamptz, bigint, bigint);

-- The wallet projection written once per ledger INSERT instead of once per entry: a purchase's
-- two entries (one statement) rewrote the wallet row twice, with a trigger call, a row version and
-- a status notification each. The trigger now runs once per statement and sums the statement's
-- entries per bot (src/migrations/functions/ledger_apply_entry.sql, applied after this file).
DROP TRIGGER ledger_entries_apply ON ledger_entries;
CREATE TRIGGER ledger_entries_apply AFTER INSERT ON ledger_entries REFERENCING NEW TABLE AS new_entries
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_apply_entry();
