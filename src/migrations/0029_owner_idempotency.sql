-- Idempotency-Key of the owner calls that move money or decide (src/owners/idempotency.ts): owner
-- funding, top-up approval and decline, manual webhook retry. One row per owner and key, inserted
-- first in the call's own transaction, so a concurrent call with the same key waits on the primary
-- key until the first commits (then replays its answer) or rolls back (then runs itself). Only a
-- successful answer is kept (200), for 24 hours; the answer holds no secret (amounts, balances,
-- ids), so it is stored as it was sent.
CREATE TABLE owner_idempotency (
  owner_id text NOT NULL REFERENCES owners(id),
  key text NOT NULL,
  request_hash text NOT NULL,
  response jsonb,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (owner_id, key)
);
CREATE INDEX owner_idempotency_created_idx ON owner_idempotency (created_at);
