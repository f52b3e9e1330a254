-- Every attempt of a webhook delivery, not only the last one (the delivery row keeps the latest
-- outcome as before). Written by the statement that records a batch of attempts
-- (src/webhooks/worker.ts); pruned with its delivery by the retention job (src/jobs/retention.ts).
-- No foreign key: the retention job deletes a delivery and its attempts in one statement, and a
-- key check per inserted attempt would cost the worker a lookup and a row lock each.
CREATE TABLE webhook_attempts (
  delivery_id text NOT NULL,
  attempt integer NOT NULL CHECK (attempt > 0),
  attempted_at timestamptz NOT NULL,
  ok boolean NOT NULL,
  response_status integer,
  response_excerpt text,
  error text,
  duration_ms integer,
  target text,
  PRIMARY KEY (delivery_id, attempt)
);

-- Deliveries attempted before this migration keep their last attempt.
INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, ok, response_status, response_excerpt,
                              error, duration_ms, target)
SELECT id, attempts, last_attempt_at, coalesce(response_status BETWEEN 200 AND 299, false), response_status,
       response_excerpt, error, duration_ms, target
  FROM webhook_deliveries
 WHERE attempts > 0 AND last_attempt_at IS NOT NULL;
