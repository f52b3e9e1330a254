-- One webhook delivery per event, written by the trigger events_create_webhook_delivery (0003)
-- in the transaction that writes the event, so no event exists without its delivery, whichever
-- module emits it (src/events/outbox.ts, src/checkout/service.ts). The delivery id shares the event
-- id's random part (evt_X → whd_X); the first attempt is due when the event happened. seq is the
-- event's place in the order events were written (events.seq): each bot's deliveries are claimed
-- in that order (webhook_claim), not in the order of their ids, which is random within a
-- millisecond (0040). The delivery is pending, so it is queued too (webhook_queue, 0046): the queue
-- row is what the worker claims. A card purchase's purchase.approved is the one event not written
-- through this trigger: spend_run writes the same two rows in the event's own statement (migration
-- 0055, spend_run.sql); a change here is a change there (test/spend/ownRows.test.ts compares them).
CREATE OR REPLACE FUNCTION webhook_delivery_for_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_id text := 'whd_' || substr(NEW.id, position('_' in NEW.id) + 1);
BEGIN
  -- One statement for both rows (a statement's executor start-up is most of such an insert's cost).
  WITH delivery AS (
    INSERT INTO webhook_deliveries (id, event_id, bot_id, event_type, next_attempt_at, created_at, seq)
    VALUES (v_id, NEW.id, NEW.bot_id, NEW.type, NEW.created_at, NEW.created_at, NEW.seq)
  )
  INSERT INTO webhook_queue (delivery_id, event_id, bot_id, seq, due_at)
  VALUES (v_id, NEW.id, NEW.bot_id, NEW.seq, NEW.created_at);
  RETURN NEW;
END $$;
