-- The bot's message queue read from the delivery side (issue 34). Until now a successful delivery
-- also wrote its event (events.delivered_at), and that update was never HOT: delivered_at is in the
-- predicate of events_undelivered_idx, which the message queue (GET /api/v1/bot/messages), the
-- status's pending_messages and the queue-depth metrics read. That write (a new version of the
-- event row with an entry in each of its three indexes, and the statement trigger announcing the
-- bots) was about a fifth of the database's work per delivery.
--
-- The message queue is the events neither delivered nor acknowledged, that is, of the events not
-- acknowledged (events.acked_at), those whose delivery is
--   - pending: exactly the deliveries with a webhook_queue row (0046), found per bot through
--     webhook_queue_bot_idx below (the queue row goes in the statement that records a delivery);
--   - failed for good: webhook_deliveries.failed_at, set by the recording function when it fails a
--     delivery and cleared by an owner's retry, found per bot through webhook_deliveries_failed_idx.
-- Neither index covers a column that a successful delivery's update of its row changes, so that
-- update can stay HOT (0046). events.delivered_at is no longer written (the delivery row's
-- delivered_at says when); events_undelivered_idx, which would now list every event not acknowledged,
-- goes.
ALTER TABLE webhook_deliveries ADD COLUMN failed_at timestamptz;
UPDATE webhook_deliveries d
   SET failed_at = coalesce(d.last_attempt_at, d.created_at)
  FROM events e
 WHERE e.id = d.event_id AND d.status = 'failed' AND e.delivered_at IS NULL AND e.acked_at IS NULL;
CREATE INDEX webhook_deliveries_failed_idx ON webhook_deliveries (bot_id, seq) WHERE failed_at IS NOT NULL;
CREATE INDEX webhook_queue_bot_idx ON webhook_queue (bot_id, seq);
DROP INDEX events_undelivered_idx;
