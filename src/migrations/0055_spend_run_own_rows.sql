-- spend_run does itself, for the rows it writes, the work the triggers of their tables did (issue
-- 30): for a purchase's two ledger entries, the wallet projection and the double-entry check; for a
-- card purchase's purchase.approved event, its webhook delivery and queue rows and its two
-- announcements. Those statements run with botpay.written_by = 'spend_run' (set_config, local to
-- the transaction, set by spend_run just before each and cleared right after it), and the triggers
-- below are not called for them: the condition is read once per statement (or row) at queue time,
-- as webhook_deliveries_queue_sync reads botpay.webhook_queue (0046). Every other writer's rows
-- (holds decided, top-ups, refunds, the x402 reconciler, tasks, other events, imports, a previous
-- version's instances) go through the same triggers as before.
--
-- - The ledger: spend_run's funds check, which was its `SELECT … FOR UPDATE` of the method's wallet
--   row, is now the UPDATE of that row (the same lock at the same place in the lock order) adding
--   exactly what the entries add; the entries follow in one INSERT, −amount and +amount of one
--   value, balanced by construction. Neither ledger_entries_apply (its call, its sum over the
--   transition table, its own write of the row) nor ledger_entries_balanced (two balance lookups at
--   commit) is called for them.
-- - The event: one statement writes the event, its delivery and its queue row, as
--   webhook_delivery_for_event does (test/spend/ownRows.test.ts compares the rows of both paths,
--   column by column), then botpay_notify on botpay_events (events_wake) and botpay_bot_state
--   (events_state_insert).
--
-- PostgreSQL's CPU per approved card purchase (spend_run called from one session per variant,
-- alternated batches of 50, backend CPU from /proc): the ledger part −10 % (paired ratio
-- 0.87–0.92 over five runs), the event part a further −5 % (0.93–1.00 over five runs).
DROP TRIGGER ledger_entries_apply ON ledger_entries;
CREATE TRIGGER ledger_entries_apply AFTER INSERT ON ledger_entries REFERENCING NEW TABLE AS new_entries
  FOR EACH STATEMENT
  WHEN (current_setting('botpay.written_by', true) IS DISTINCT FROM 'spend_run')
  EXECUTE FUNCTION ledger_apply_entry();

DROP TRIGGER ledger_entries_balanced ON ledger_entries;
CREATE CONSTRAINT TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (current_setting('botpay.written_by', true) IS DISTINCT FROM 'spend_run')
  EXECUTE FUNCTION ledger_check_balanced();

DROP TRIGGER events_wake ON events;
CREATE TRIGGER events_wake AFTER INSERT ON events
  FOR EACH ROW
  WHEN (current_setting('botpay.written_by', true) IS DISTINCT FROM 'spend_run')
  EXECUTE FUNCTION notify_new_event();

DROP TRIGGER events_create_webhook_delivery ON events;
CREATE TRIGGER events_create_webhook_delivery AFTER INSERT ON events
  FOR EACH ROW
  WHEN (current_setting('botpay.written_by', true) IS DISTINCT FROM 'spend_run')
  EXECUTE FUNCTION webhook_delivery_for_event();

DROP TRIGGER events_state_insert ON events;
CREATE TRIGGER events_state_insert AFTER INSERT ON events REFERENCING NEW TABLE AS changed_rows
  FOR EACH STATEMENT
  WHEN (current_setting('botpay.written_by', true) IS DISTINCT FROM 'spend_run')
  EXECUTE FUNCTION notify_bot_state_rows();
