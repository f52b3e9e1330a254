-- A new event wakes the delivery workers of every instance (channel botpay_events), whichever
-- code path inserted it: trigger events_wake (AFTER INSERT ON events, migration 0001), or, for a
-- card purchase's purchase.approved, spend_run itself (migration 0055: its insert skips the
-- trigger and calls botpay_notify alike). Defined first in migration 0001; this file is its one
-- definition since 0033.
CREATE OR REPLACE FUNCTION notify_new_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM botpay_notify('botpay_events', NEW.bot_id);
  RETURN NULL;
END $$;
