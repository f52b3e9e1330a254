-- The database functions that were still defined only in migrations have files of their own now
-- (src/migrations/functions/: botpay_notify, ledger_forbid_change, notify_bot_key,
-- notify_bot_state, notify_bot_state_rows, notify_new_event, spend_counters_update), applied after
-- the migrations with the bodies the migrations last gave them; nothing changes in the database
-- for them. webhook_delivery_for_event (0003) is still to move.
--
-- The checkout_attempt of migration 0010 (18 parameters: no Idempotency-Key, no rate limit) was
-- kept by 0023 for instances of the version before it during a rolling deploy, "until the next
-- migration". Nine migrations later no such instance can be running beside this version: dropped.
-- The checkout_attempt of 0023 (22 parameters, src/migrations/functions/checkout_attempt.sql)
-- stays for the time docs/deploy.md states.
DROP FUNCTION IF EXISTS checkout_attempt(text, text, integer, bigint, text, text, text, text, text, text,
  timestamptz, timestamptz, timestamptz, timestamptz, integer, text, text, text);
