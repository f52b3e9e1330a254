-- Notifications without serialising commits. PostgreSQL makes every transaction that NOTIFYs
-- take a global lock through its commit, which caps write throughput. So inside transactions the
-- service only announces what to notify: botpay_notify() raises a NOTICE the PostgreSQL driver
-- collects, and the driver sends the NOTIFYs after COMMIT (src/platform/db/postgres.ts). Sessions
-- that do not ask for that (PGlite, psql) get a plain pg_notify at commit. Called by the notify_*
-- trigger functions (files beside this one) and webhook_delivery_for_event (0003). Defined first in
-- migration 0001; this file is its one definition since 0033.
CREATE OR REPLACE FUNCTION botpay_notify(channel text, payload text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('botpay.defer_notify', true) = 'on' THEN
    RAISE NOTICE 'botpay-notify %|%', channel, payload;
  ELSE
    PERFORM pg_notify(channel, payload);
  END IF;
END $$;
