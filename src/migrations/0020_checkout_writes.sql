-- Fewer writes per checkout (issue 17), and database functions kept in files of their own.
--
-- Rate limits: one row per key, updated in place, instead of one row (and two index entries) per
-- counted request behind an advisory lock. The row holds the key's counted requests still inside
-- the window, at most `limit` of them (all that is needed to decide the next one and its
-- Retry-After), so the sliding-window semantics and figures stay exact; the row lock taken by the
-- upsert serialises concurrent requests of a key across instances as the advisory lock did. The
-- hits column is not indexed, so an update is a HOT update (no index entry); fillfactor leaves the
-- page room for it. rate_limit_consume / rate_limit_release: src/migrations/functions/.
CREATE TABLE rate_limits (
  key text PRIMARY KEY,
  hits timestamptz[] NOT NULL
) WITH (fillfactor = 50);

-- The hits counted so far move over (each key's newest ones; a key is used with one window only).
INSERT INTO rate_limits (key, hits)
SELECT key, array_agg(at ORDER BY at) FROM rate_limit_hits GROUP BY key;
-- rate_limit_hits stays (an instance of the previous version may still prune it during a rolling
-- deploy) but is no longer written: rate_limit_consume, which both versions call, uses rate_limits.
DELETE FROM rate_limit_hits;
