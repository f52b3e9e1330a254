-- A purchase announced its bot three times on botpay_bot_state: the wallet row's trigger
-- (wallets_state), the bot counter's (spend_windows_state) and spend_run's own announcement of
-- the event. The three carry the same key ('bot:<id>'), which the driver merges after commit, so
-- what other instances receive is unchanged; but each was a trigger call and a NOTICE inside the
-- purchase's statement. spend_run now runs with botpay.written_by = 'spend_run' from the bot
-- counter to its last row (src/migrations/functions/spend_run.sql) and announces 'bot:<id>' once
-- itself, for every purchase: card or x402, held or approved, real profile or decoy alike (the
-- key and the number of announcements show nothing of the profile:
-- test/splitKnowledge/notifications.test.ts). Every other writer of these rows (holds decided,
-- top-ups, refunds, imports, a previous version's spend_run) still announces through the
-- triggers, whose condition is read when the row is written, as in 0055.
DROP TRIGGER wallets_state ON wallets;
CREATE TRIGGER wallets_state AFTER INSERT OR UPDATE ON wallets
  FOR EACH ROW
  WHEN (current_setting('botpay.written_by', true) IS DISTINCT FROM 'spend_run')
  EXECUTE FUNCTION notify_bot_state();

DROP TRIGGER spend_windows_state ON spend_windows;
CREATE TRIGGER spend_windows_state AFTER INSERT OR UPDATE ON spend_windows
  FOR EACH ROW
  WHEN (NEW.scope LIKE 'bot:%' AND current_setting('botpay.written_by', true) IS DISTINCT FROM 'spend_run')
  EXECUTE FUNCTION notify_bot_state();
