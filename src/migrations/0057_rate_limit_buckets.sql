-- Rate limits whose cost does not grow with the limit.
--
-- Until now a key's row held every counted request still inside its window (at most `limit` of
-- them), and each request unnested, sorted and rewrote that array: its cost grew with the number
-- of requests in the window. At the 30 checkouts an hour of the default that is nothing, but the
-- limits may be raised to 1,000,000 an hour (a bot paying many small x402 resources needs that):
-- with 6,000 requests in its hour, one call took about 7.6 ms of PostgreSQL's CPU, under the key's
-- row lock, and grew with every request after.
--
-- A key whose limit is at most 100 keeps its exact list of requests (hits), as before. Above that,
-- the row holds 61 counters instead, one per sixtieth of the window (bucket_ids: which bucket each
-- slot holds; bucket_counts: its requests; window_seconds: the window they divide), so a request
-- costs the same whatever the limit and the traffic (rate_limit_consume.sql). last_at: when a
-- bucket row last counted a request (the data-retention job reads it, and an exact row's newest hit).
ALTER TABLE rate_limits
  ADD COLUMN window_seconds integer,
  ADD COLUMN bucket_ids bigint[],
  ADD COLUMN bucket_counts integer[],
  ADD COLUMN last_at timestamptz;
