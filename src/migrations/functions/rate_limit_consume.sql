-- The sliding-window rate limit in one statement (src/platform/rateLimit.ts). The key's row holds
-- its counted requests inside the window (at most p_limit of them); the upsert locks the row, so
-- two instances cannot both see "2 of 3 used" and both let a request through (the lock lasts until
-- the caller's transaction ends, and a rolled-back request is not counted). A counted request
-- rewrites the row in place. Returns 0 when the request was counted, otherwise the seconds until
-- the oldest of the last p_limit requests leaves the window (at least 1).
--
-- The array work is written out inside rate_limit_consume's statements rather than calling
-- rate_limit_recent: a LANGUAGE sql function that cannot be inlined (its body has a FROM) is parsed
-- and planned again at every call of the statement that uses it (its cache lives in the
-- statement's executor state), which cost about a tenth of PostgreSQL's CPU per checkout
-- (perf on the backends under npm run bench:checkout). Statements of a plpgsql function are
-- planned once per session.

-- The newest n hits after `since`, oldest first.
CREATE OR REPLACE FUNCTION rate_limit_recent(p_hits timestamptz[], p_since timestamptz, p_n integer)
RETURNS timestamptz[] LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_agg(h ORDER BY h), '{}')
    FROM (SELECT h FROM unnest(p_hits) h WHERE h > p_since ORDER BY h DESC LIMIT greatest(p_n, 0)) recent
$$;

CREATE OR REPLACE FUNCTION rate_limit_consume(p_key text, p_limit integer, p_window_seconds integer, p_now timestamptz)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  since timestamptz := p_now - make_interval(secs => p_window_seconds);
  oldest timestamptz;
BEGIN
  IF p_limit <= 0 THEN RETURN 1; END IF;
  -- Counted: the newest p_limit − 1 hits inside the window, oldest first, then this one.
  INSERT INTO rate_limits AS r (key, hits) VALUES (p_key, ARRAY[p_now])
  ON CONFLICT (key) DO UPDATE
    SET hits = (SELECT coalesce(array_agg(k.h ORDER BY k.h), '{}')
                  FROM (SELECT h FROM unnest(r.hits) h WHERE h > since ORDER BY h DESC LIMIT p_limit - 1) k) || p_now
    WHERE (SELECT count(*) FROM unnest(r.hits) h WHERE h > since) < p_limit;
  IF FOUND THEN RETURN 0; END IF;
  -- Refused: ON CONFLICT locked the row all the same, so this reads what decided: the oldest of
  -- the newest p_limit hits inside the window.
  SELECT (SELECT min(k.h) FROM (SELECT h FROM unnest(hits) h WHERE h > since ORDER BY h DESC LIMIT p_limit) k)
    INTO oldest FROM rate_limits WHERE key = p_key;
  RETURN greatest(1, ceil(extract(epoch FROM (oldest + make_interval(secs => p_window_seconds) - p_now))))::integer;
END $$;

-- Gives back one counted request of the key made at p_at (a pairing attempt that was not a wrong guess).
CREATE OR REPLACE FUNCTION rate_limit_release(p_key text, p_at timestamptz)
RETURNS void LANGUAGE sql AS $$
  UPDATE rate_limits
     SET hits = hits[:array_position(hits, p_at) - 1] || hits[array_position(hits, p_at) + 1:]
   WHERE key = p_key AND p_at = ANY (hits)
$$;
