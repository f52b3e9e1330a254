-- Keeps webhook_queue (0046) in step with a delivery row whose status, next_attempt_at or attempts
-- were written outside the delivery worker's recording function: called by the trigger
-- webhook_deliveries_queue_sync (0046), whose condition lets through only changes into or out of
-- 'pending' or of a pending row's due time or attempts, and none made inside
-- webhook_record_and_claim (which writes the queue itself). The writers it follows: an
-- acknowledgement (src/webhooks/service.ts: pending → acked), an owner's retry (failed → pending, or
-- a pending row due now), a tunnel's first connection (parked rows due again: tunnelWait.ts), and
-- instances of the previous version doing the same with their own statements.
--   - still or again pending: the queue row is due at the delivery's next_attempt_at, with its
--     attempts; a lease under way is kept (the send out records its result as before);
--   - no longer pending: the queue row goes (a send still out finds no lease to record against, so
--     its result is not written: the delivery was acknowledged or settled meanwhile).
CREATE OR REPLACE FUNCTION webhook_queue_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status = 'pending' THEN
    INSERT INTO webhook_queue (delivery_id, event_id, bot_id, seq, attempts, due_at)
    VALUES (NEW.id, NEW.event_id, NEW.bot_id,
            coalesce(NEW.seq, (SELECT e.seq FROM events e WHERE e.id = NEW.event_id), 0), NEW.attempts,
            NEW.next_attempt_at)
    -- A held row (0058) keeps being held: its new due time is the one it comes back with.
    ON CONFLICT (delivery_id) DO UPDATE
      SET due_at = CASE WHEN webhook_queue.held_due_at IS NULL THEN EXCLUDED.due_at ELSE webhook_queue.due_at END,
          held_due_at = CASE WHEN webhook_queue.held_due_at IS NULL THEN NULL ELSE EXCLUDED.due_at END,
          attempts = EXCLUDED.attempts;
  ELSE
    DELETE FROM webhook_queue WHERE delivery_id = NEW.id;
  END IF;
  RETURN NULL;
END $$;
