-- The sliding-window rate limit in one round trip. Same semantics as before (per-key advisory
-- lock, count of the last `limit` hits inside the window, insert when under the limit), but run
-- inside the database: in READ COMMITTED each statement of a volatile PL/pgSQL function takes a
-- fresh snapshot, so the count after the lock sees every hit committed before it.
-- Returns 0 when the hit was counted, otherwise the seconds until the window frees.
CREATE FUNCTION rate_limit_consume(p_key text, p_limit integer, p_window_seconds integer, p_now timestamptz)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  n integer;
  oldest timestamptz;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('ratelimit:' || p_key));
  SELECT count(*)::int, min(at) INTO n, oldest
    FROM (SELECT at FROM rate_limit_hits
           WHERE key = p_key AND at > p_now - make_interval(secs => p_window_seconds)
           ORDER BY at DESC LIMIT p_limit) recent;
  IF n >= p_limit THEN
    RETURN greatest(1, ceil(extract(epoch FROM (oldest + make_interval(secs => p_window_seconds) - p_now))))::integer;
  END IF;
  INSERT INTO rate_limit_hits (key, at) VALUES (p_key, p_now);
  RETURN 0;
END $$;
