-- Webhook deliveries: one row per event (each bot has exactly one target: its callback_url or its
-- managed tunnel). The row is created by a trigger on `events`, so it commits in the same
-- transaction as the event and the state change: whichever module calls emitEvent, no event can
-- exist without its delivery. The delivery id shares the event id's random part (evt_X → whd_X).
--
-- Work is claimed with FOR UPDATE SKIP LOCKED and a lease (locked_until + lock_token): a worker
-- that dies between sending and recording leaves the lease to expire and the delivery is sent
-- again (at least once, never lost); a late result of an expired lease is ignored (token check).
CREATE TABLE webhook_deliveries (
  id text PRIMARY KEY,
  event_id text NOT NULL UNIQUE REFERENCES events(id),
  bot_id text NOT NULL REFERENCES bots(id),
  event_type text NOT NULL,
  -- pending: waiting for its next attempt; delivered: a 2xx arrived; failed: the first attempt and
  -- every automatic retry failed; acked: the bot acknowledged the event through the messages API.
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed', 'acked')),
  attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  next_attempt_at timestamptz NOT NULL,
  locked_until timestamptz,
  lock_token text,
  last_attempt_at timestamptz,
  delivered_at timestamptz,
  response_status integer,
  response_excerpt text,
  error text,
  duration_ms integer,
  target text,
  created_at timestamptz NOT NULL
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_bot_idx ON webhook_deliveries (bot_id, created_at DESC);

CREATE FUNCTION webhook_delivery_for_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO webhook_deliveries (id, event_id, bot_id, event_type, next_attempt_at, created_at)
  VALUES ('whd_' || substr(NEW.id, position('_' in NEW.id) + 1), NEW.id, NEW.bot_id, NEW.type,
          NEW.created_at, NEW.created_at);
  RETURN NEW;
END $$;
CREATE TRIGGER events_create_webhook_delivery AFTER INSERT ON events
  FOR EACH ROW EXECUTE FUNCTION webhook_delivery_for_event();

-- Events written before this migration that were never delivered nor acknowledged get a delivery.
INSERT INTO webhook_deliveries (id, event_id, bot_id, event_type, next_attempt_at, created_at)
SELECT 'whd_' || substr(e.id, position('_' in e.id) + 1), e.id, e.bot_id, e.type, e.created_at, e.created_at
  FROM events e
 WHERE e.delivered_at IS NULL AND e.acked_at IS NULL;
