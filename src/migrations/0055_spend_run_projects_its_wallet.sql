-- spend_run writes the wallet projection of its own purchase (issue 30): the funds check that was
-- its `SELECT … FOR UPDATE` of the method's wallet row is now the UPDATE of that row (the same lock,
-- taken at the same place in the lock order), adding exactly what the purchase's two entries add;
-- the entries follow in one INSERT, -amount and +amount of one value. For that statement no
-- trigger function is called: not ledger_entries_apply (its call, its sum over the transition table
-- and its second write of the row) and not ledger_entries_balanced (two balance lookups at commit
-- for a pair balanced by construction). PostgreSQL's CPU per approved card purchase −10 % (spend_run
-- called from one session per variant in alternated batches of 50, backend CPU from /proc: paired
-- ratio 0.87–0.92 over five runs; the projection alone −2 to −5 %, the balance check the rest).
--
-- Every other writer's entries (holds decided, top-ups, refunds, the x402 reconciler, tasks,
-- imports, a previous version's instances) are projected and checked by the same two triggers as
-- before. The statement is recognised by the setting botpay.ledger_by = 'spend_run' (set_config,
-- local to the transaction, set by spend_run around its one INSERT of entries and cleared right
-- after it), read once per statement by the statement trigger's condition and once per row by the
-- constraint trigger's, as webhook_deliveries_queue_sync reads botpay.webhook_queue (0046).
DROP TRIGGER ledger_entries_apply ON ledger_entries;
CREATE TRIGGER ledger_entries_apply AFTER INSERT ON ledger_entries REFERENCING NEW TABLE AS new_entries
  FOR EACH STATEMENT
  WHEN (current_setting('botpay.ledger_by', true) IS DISTINCT FROM 'spend_run')
  EXECUTE FUNCTION ledger_apply_entry();

DROP TRIGGER ledger_entries_balanced ON ledger_entries;
CREATE CONSTRAINT TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (current_setting('botpay.ledger_by', true) IS DISTINCT FROM 'spend_run')
  EXECUTE FUNCTION ledger_check_balanced();
