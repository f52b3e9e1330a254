-- A bot's webhooks start in the order of its events (issue 34). Events already carry that order:
-- events.seq (0001), taken from a sequence when the event is written. Time-ordered ids
-- (src/platform/ids.ts) order by millisecond only, and within one millisecond their random part
-- decided, so the claim (which ordered a bot's due rows by due time, then id) could hand a bot at
-- its in-flight bound a later event of the same millisecond before an earlier one.
--
-- The delivery row gets its event's seq (written by the trigger webhook_delivery_for_event, now a
-- function file of its own), so the claim reads the order from the row it already reads, without
-- a join with events per candidate. Nullable, and added without a default: no rewrite of a table
-- of millions of past deliveries. Rows that can still be sent (pending, and failed ones an owner
-- may retry) take their event's seq here; delivered and acknowledged rows are never sent again and
-- keep null.
--
-- Rolling deploys: instances of the previous version call webhook_claim and
-- webhook_record_and_claim with the same arguments and get the same columns back, and their events
-- go through the same trigger, so they order by seq too from this migration's commit on.
ALTER TABLE webhook_deliveries ADD COLUMN seq bigint;
UPDATE webhook_deliveries d
   SET seq = e.seq
  FROM events e
 WHERE e.id = d.event_id AND d.status IN ('pending', 'failed');
-- The claim's window of due rows, in claim order: due time, then event order.
DROP INDEX webhook_deliveries_due_idx;
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, seq) WHERE status = 'pending';
