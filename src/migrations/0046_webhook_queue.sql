-- The webhook queue (issue 34): what is due and what is leased, in a narrow table of its own, apart
-- from the wide delivery row. Before, a delivery's row was rewritten twice per attempt (the lease,
-- then the result), neither update HOT since the lease columns and the status were indexed: about
-- 38 % of the recording call's CPU went to index entries. Now:
--   - webhook_delivery_for_event (the events trigger) writes the delivery row and its queue row;
--   - webhook_claim leases queue rows only (locked_until, lock_token);
--   - webhook_record_and_claim writes the delivery row once per attempt with its result (no index
--     covers what it changes any more, so the update can be HOT) and deletes the queue row (delivered,
--     failed) or puts it back with its next due time (a retry).
-- The queue holds exactly the pending deliveries: the delivery row stays the record of a delivery's
-- status and next_attempt_at (what the API and the dashboard show), and every other write of those
-- two columns (an acknowledgement, an owner's retry, a tunnel's first connection, instances of the
-- previous version) is followed by the trigger webhook_deliveries_queue_sync below.
--
-- No foreign key to webhook_deliveries: a key check per queue row would cost the event's
-- transaction a lookup, and a queue row never outlives its delivery's pending state (the retention
-- job deletes only final deliveries).
-- The queue row carries what a claim and a recording decide on, so that neither reads the wide row:
-- the event (the claim reads its body and type), the attempts made so far (the recording decides
-- from them between a retry and a failure) and the lease.
CREATE TABLE webhook_queue (
  delivery_id text PRIMARY KEY,
  event_id text NOT NULL,
  bot_id text NOT NULL,
  -- The event's place in the order events were written (events.seq, 0040): a bot's rows are claimed in it.
  seq bigint NOT NULL,
  -- The same count as webhook_deliveries.attempts, written with it.
  attempts integer NOT NULL DEFAULT 0,
  due_at timestamptz NOT NULL,
  locked_until timestamptz,
  lock_token text
);
-- The claim's window: rows not under a lease, in claim order (due time, then event order). A claim
-- takes its rows out of this index (the leased version of a row has no entry in it), so the window
-- does not walk past the rows in flight, which are the oldest.
CREATE INDEX webhook_queue_due_idx ON webhook_queue (due_at, seq) WHERE lock_token IS NULL;
-- Rows under a lease (live or expired), per bot: the deployment-wide in-flight count of each bot,
-- and the expired leases a claim takes back.
CREATE INDEX webhook_queue_leased_idx ON webhook_queue (bot_id, locked_until) WHERE lock_token IS NOT NULL;

-- The pending deliveries move into the queue, with their leases (an instance of the previous version
-- may have sends out; their results are recorded against these rows) and parked due times.
INSERT INTO webhook_queue (delivery_id, event_id, bot_id, seq, attempts, due_at, locked_until, lock_token)
SELECT d.id, d.event_id, d.bot_id, coalesce(d.seq, e.seq, 0), d.attempts, d.next_attempt_at, d.locked_until,
       d.lock_token
  FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id
 WHERE d.status = 'pending';

-- The delivery row's due and lease indexes go: nothing reads them, and they made every write of the
-- row a non-HOT update. Its lease columns stay, unused (docs/deploy.md, "Compatibility pieces").
DROP INDEX webhook_deliveries_due_idx;
DROP INDEX webhook_deliveries_leased_idx;
-- Room on each new page for the row's one update with the attempt's result, so that it stays on
-- its page (HOT: no new index entry). Pages written before keep their fill.
ALTER TABLE webhook_deliveries SET (fillfactor = 60);

-- Writes of a delivery's status, due time or attempts outside the worker's own functions keep the queue in
-- step (webhook_queue_sync): an acknowledgement, an owner's retry, a tunnel's first connection, and
-- the same statements of instances of the previous version during a rolling deploy. The worker's
-- recording function writes the queue itself and says so with the setting
-- botpay.webhook_queue = 'written' (set_config around its recording statement), which the condition reads once
-- per row, so the trigger is not called for the worker's own writes. The function's definition is
-- its file (src/migrations/functions/), applied after the migrations in the same transaction; it is
-- created here only so that the trigger can name it.
CREATE FUNCTION webhook_queue_sync() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER webhook_deliveries_queue_sync
  AFTER UPDATE OF status, next_attempt_at, attempts ON webhook_deliveries
  FOR EACH ROW
  WHEN ((OLD.status = 'pending' OR NEW.status = 'pending')
        AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.next_attempt_at IS DISTINCT FROM NEW.next_attempt_at
             OR OLD.attempts IS DISTINCT FROM NEW.attempts)
        AND current_setting('botpay.webhook_queue', true) IS DISTINCT FROM 'written')
  EXECUTE FUNCTION webhook_queue_sync();
