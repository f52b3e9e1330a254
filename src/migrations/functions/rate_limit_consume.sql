-- The sliding-window rate limit (src/platform/rateLimit.ts): at most p_limit counted requests of a
-- key in any p_window_seconds. The key's row is locked for the caller's transaction (by the upsert
-- or SELECT … FOR UPDATE), so two instances cannot both see "2 of 3 used" and both let a request
-- through, and a rolled-back request is not counted. Returns 0 when the request was counted,
-- otherwise the seconds until one would be (at least 1). The row is rewritten in place (no indexed
-- column changes: a HOT update).
--
-- Two forms of the row, chosen by the limit (migration 0057):
--
-- - p_limit <= 100: exact. hits holds the key's counted requests inside the window, oldest first,
--   at most p_limit of them; the answer is the exact wait until the oldest of the last p_limit
--   leaves the window. One statement. Its cost grows with the hits, which the limit bounds.
-- - p_limit > 100: buckets, so that a request costs the same at 101 or 1,000,000 an hour. The
--   window is divided into 60 buckets of p_window_seconds / 60 (a minute of an hour) and the row
--   keeps 61 counters (bucket_ids[s] is the bucket slot s holds, bucket_counts[s] its requests; a
--   bucket lives in slot 1 + (its number mod 61)). A request in bucket n counts every bucket from
--   n − 60 on: they cover the whole window before it, plus at most one bucket width older. So no
--   window ever holds more than p_limit requests, and a request is refused at most one bucket
--   width (a sixtieth of the window) before the exact rule would let it through; the answered wait
--   is when the oldest buckets stop counting.
--
--   The common case is one statement: a request in the same bucket as the key's last counted one
--   (last_at), whose slot still holds that bucket, is counted against the total kept then
--   (bucket_total: the requests the window counted at last_at's bucket, migration 0062), and adds
--   itself to its slot and to the total; no loop over the slots. Any other request (a new bucket, a
--   refusal, a clock behind or ahead, a row whose total is unknown) counts the slots one by one and
--   keeps the total again. A bucket's count changed by any other statement (rate_limit_release)
--   forgets the total.
--
-- A key moves from one form to the other with its counted requests when its limit crosses 100
-- (a configuration change): hits go into their buckets, a bucket's requests become hits at its end
-- (never counted for less time than before). A key is used with one window; a bucket row met with
-- another window starts empty. last_at, when a bucket row last counted a request, and the newest
-- hit are what the data-retention job reads (src/jobs/retention.ts).
--
-- Exact form: the array work is written out inside the statement rather than calling
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
  width numeric;
  n bigint;
  row_hits timestamptz[];
  ids bigint[];
  counts integer[];
  row_window integer;
  hit timestamptz;
  m bigint;
  s integer;
  counted bigint := 0;
BEGIN
  IF p_limit <= 0 THEN RETURN 1; END IF;

  IF p_limit <= 100 THEN
    LOOP
      -- Counted: the newest p_limit − 1 hits inside the window, oldest first, then this one.
      INSERT INTO rate_limits AS r (key, hits) VALUES (p_key, ARRAY[p_now])
      ON CONFLICT (key) DO UPDATE
        SET hits = (SELECT coalesce(array_agg(k.h ORDER BY k.h), '{}')
                      FROM (SELECT h FROM unnest(r.hits) h WHERE h > since ORDER BY h DESC LIMIT p_limit - 1) k) || p_now
        WHERE r.bucket_ids IS NULL AND (SELECT count(*) FROM unnest(r.hits) h WHERE h > since) < p_limit;
      IF FOUND THEN RETURN 0; END IF;
      -- ON CONFLICT locked the row all the same. Refused, unless the row holds buckets (the limit
      -- was above 100 before): then their requests become hits at their buckets' ends, and again.
      SELECT r.bucket_ids, r.bucket_counts, r.window_seconds INTO ids, counts, row_window
        FROM rate_limits r WHERE r.key = p_key;
      EXIT WHEN ids IS NULL;
      width := row_window / 60.0;
      n := floor(extract(epoch FROM p_now) / width)::bigint;
      UPDATE rate_limits r
         SET hits = CASE WHEN row_window = p_window_seconds THEN
                      (SELECT coalesce(array_agg(k.h ORDER BY k.h), '{}')
                         FROM (SELECT least(to_timestamp(((b.id + 1) * width)::double precision), p_now) AS h
                                 FROM unnest(ids, counts) AS b(id, c), generate_series(1, least(b.c, p_limit)) g
                                WHERE b.id >= n - 60 ORDER BY b.id DESC LIMIT p_limit) k)
                    ELSE '{}' END,
             bucket_ids = NULL, bucket_counts = NULL, bucket_total = NULL, window_seconds = NULL
       WHERE r.key = p_key;
    END LOOP;
    -- Refused: what decided is the oldest of the newest p_limit hits inside the window.
    SELECT (SELECT min(k.h) FROM (SELECT h FROM unnest(hits) h WHERE h > since ORDER BY h DESC LIMIT p_limit) k)
      INTO oldest FROM rate_limits WHERE key = p_key;
    RETURN greatest(1, ceil(extract(epoch FROM (oldest + make_interval(secs => p_window_seconds) - p_now))))::integer;
  END IF;

  -- Buckets.
  width := p_window_seconds / 60.0;
  n := floor(extract(epoch FROM p_now) / width)::bigint;
  -- The common case: the last counted request was in this bucket, which its slot still holds, and
  -- the total kept then is below the limit. The row's condition is the whole check.
  s := 1 + (n % 61)::integer;
  UPDATE rate_limits r
     SET bucket_counts[s] = r.bucket_counts[s] + 1, bucket_total = r.bucket_total + 1, last_at = p_now
   WHERE r.key = p_key AND r.window_seconds = p_window_seconds AND r.bucket_ids[s] = n
     AND r.bucket_total < p_limit AND floor(extract(epoch FROM r.last_at) / width)::bigint = n;
  IF FOUND THEN RETURN 0; END IF;
  SELECT r.hits, r.bucket_ids, r.bucket_counts, r.window_seconds INTO row_hits, ids, counts, row_window
    FROM rate_limits r WHERE r.key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO rate_limits (key, hits) VALUES (p_key, '{}') ON CONFLICT (key) DO NOTHING;
    SELECT r.hits, r.bucket_ids, r.bucket_counts, r.window_seconds INTO row_hits, ids, counts, row_window
      FROM rate_limits r WHERE r.key = p_key FOR UPDATE;
  END IF;
  IF ids IS NULL OR row_window IS DISTINCT FROM p_window_seconds THEN
    -- A new key, or one kept exact until now: its hits go into their buckets.
    ids := array_fill(-1::bigint, ARRAY[61]);
    counts := array_fill(0, ARRAY[61]);
    FOREACH hit IN ARRAY coalesce(CASE WHEN row_window IS NULL THEN row_hits END, '{}') LOOP
      IF hit > since THEN
        m := floor(extract(epoch FROM hit) / width)::bigint;
        s := 1 + (m % 61)::integer;
        IF ids[s] = m THEN counts[s] := counts[s] + 1; ELSE ids[s] := m; counts[s] := 1; END IF;
      END IF;
    END LOOP;
  END IF;
  FOR s IN 1..61 LOOP
    IF ids[s] >= n - 60 THEN counted := counted + counts[s]; END IF;
  END LOOP;

  IF counted < p_limit THEN
    s := 1 + (n % 61)::integer;
    -- A slot holding a later bucket (another instance's clock ahead by an hour) keeps it and takes
    -- this request too: it is counted longer, never shorter.
    IF ids[s] >= n THEN counts[s] := counts[s] + 1; ELSE ids[s] := n; counts[s] := 1; END IF;
    -- Every request the window counts at this bucket: those counted before, and this one (its slot
    -- held this bucket or a later one, which were counted, or an old one, which was not).
    UPDATE rate_limits
       SET hits = '{}', bucket_ids = ids, bucket_counts = counts, bucket_total = counted + 1,
           window_seconds = p_window_seconds, last_at = p_now
     WHERE key = p_key;
    RETURN 0;
  END IF;
  -- Refused: the wait until enough of the oldest buckets stop counting (bucket m counts until
  -- bucket m + 61 begins).
  FOR m IN n - 60 .. n LOOP
    s := 1 + (m % 61)::integer;
    IF ids[s] = m THEN counted := counted - counts[s]; END IF;
    IF counted < p_limit THEN
      RETURN greatest(1, ceil((m + 61) * width - extract(epoch FROM p_now)))::integer;
    END IF;
  END LOOP;
  -- Only later buckets (clocks ahead) are left: a whole window.
  RETURN p_window_seconds;
END $$;

-- Gives back one counted request of the key made at p_at (a pairing attempt that was not a wrong
-- guess): one of its hits, or one from its bucket while that bucket is still kept.
CREATE OR REPLACE FUNCTION rate_limit_release(p_key text, p_at timestamptz)
RETURNS void LANGUAGE sql AS $$
  UPDATE rate_limits
     SET hits = hits[:array_position(hits, p_at) - 1] || hits[array_position(hits, p_at) + 1:]
   WHERE key = p_key AND p_at = ANY (hits);
  UPDATE rate_limits r
     SET bucket_counts[b.slot] = r.bucket_counts[b.slot] - 1, bucket_total = NULL
    FROM (SELECT floor(extract(epoch FROM p_at) / (x.window_seconds / 60.0))::bigint AS id,
                 1 + (floor(extract(epoch FROM p_at) / (x.window_seconds / 60.0))::bigint % 61)::integer AS slot
            FROM rate_limits x WHERE x.key = p_key AND x.bucket_ids IS NOT NULL) b
   WHERE r.key = p_key AND r.bucket_ids[b.slot] = b.id AND r.bucket_counts[b.slot] > 0
$$;
