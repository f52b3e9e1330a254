-- Changes of events announce their bots once per statement, not once per row (migration 0025,
-- triggers events_state_insert / _update / _delete with the transition table changed_rows): the
-- delivery worker records a batch of attempts in one statement, and a row trigger announced each
-- event's key separately. Each bot once, in batches of 200 keys (a notification payload holds
-- under 8,000 bytes). spend_run announces its own purchase.approved event's bot itself (migration
-- 0055: its insert skips events_state_insert). Defined first in migration 0025; this file is its
-- one definition since 0033.
CREATE OR REPLACE FUNCTION notify_bot_state_rows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  keys text;
BEGIN
  FOR keys IN
    SELECT string_agg(k, ',')
      FROM (SELECT k, (row_number() OVER ()) / 200 AS chunk
              FROM (SELECT DISTINCT 'bot:' || bot_id AS k FROM changed_rows) d) c
     GROUP BY chunk
  LOOP
    PERFORM botpay_notify('botpay_bot_state', keys);
  END LOOP;
  RETURN NULL;
END $$;
