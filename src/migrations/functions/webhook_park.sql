-- Holds back the backlog of the bots at their bound, so that no claim walks past it (0058).
--
-- A bot with p_per_bot rows under a live lease anywhere in the deployment can take nothing more;
-- webhook_claim leaves its due rows out, but they stay in webhook_queue_due_idx, where the claim's
-- window meets them one by one. This call, made by the delivery worker every few seconds
-- (src/webhooks/worker.ts, park), looks at the head of that index for the due rows of such bots and,
-- for a bot with more than 8 × p_per_bot of them there, or one that already holds rows, holds all
-- but its first 2 × p_per_bot in event order (and any that come after one of its held rows): due_at
-- becomes 'infinity' (out of every window) and held_due_at keeps the due time. webhook_unpark
-- brings them back in event order as the bot's slots free up; it is called here too, for every bot
-- that holds rows, so rows come back whatever freed the slots.
--   p_scan   due rows looked at from the head of the index (bounds the call's work)
-- One call at a time across instances (a try-lock: a call that finds another under way does
-- nothing). Returns the rows held and the rows brought back.
CREATE OR REPLACE FUNCTION webhook_park(p_now timestamptz, p_per_bot integer, p_scan integer)
RETURNS TABLE (held integer, released integer)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_keep integer := 2 * p_per_bot;
  v_above integer := 8 * p_per_bot;
  v_held integer := 0;
  v_bots text[];
BEGIN
  IF NOT pg_try_advisory_xact_lock(7254004, hashtext(current_schema())) THEN
    RETURN QUERY SELECT 0, 0;
    RETURN;
  END IF;
  WITH full_bots AS (
    SELECT l.bot_id
      FROM webhook_queue l
     WHERE l.lock_token IS NOT NULL AND l.locked_until > p_now
     GROUP BY l.bot_id
    HAVING count(*) >= p_per_bot
  ), waiting AS (
    -- The rows a claim's window would walk past, read as the claim reads them (due index order).
    SELECT q.delivery_id, q.bot_id, q.seq
      FROM webhook_queue q
     WHERE q.lock_token IS NULL AND q.due_at <= p_now
       AND q.bot_id = ANY (ARRAY(SELECT f.bot_id FROM full_bots f))
     ORDER BY q.due_at, q.seq
     LIMIT p_scan
  ), numbered AS (
    SELECT w.delivery_id, w.bot_id, w.seq,
           row_number() OVER (PARTITION BY w.bot_id ORDER BY w.seq) AS rn,
           count(*) OVER (PARTITION BY w.bot_id) AS n
      FROM waiting w
  ), ranked AS (
    -- The bot's first held row, looked up once per bot (on its first row) and spread to the others.
    SELECT x.delivery_id, x.seq, x.rn, x.n, max(x.first_held) OVER (PARTITION BY x.bot_id) AS held_from
      FROM (SELECT nb.delivery_id, nb.bot_id, nb.seq, nb.rn, nb.n,
                   CASE WHEN nb.rn = 1 THEN
                     (SELECT h.seq FROM webhook_queue h
                       WHERE h.bot_id = nb.bot_id AND h.held_due_at IS NOT NULL
                       ORDER BY h.seq LIMIT 1)
                   END AS first_held
              FROM numbered nb) AS x
  ), moved AS (
    UPDATE webhook_queue q
       SET held_due_at = q.due_at, due_at = 'infinity'
     WHERE q.delivery_id = ANY (ARRAY(
             SELECT r.delivery_id FROM ranked r
              WHERE (r.n > v_above OR r.held_from IS NOT NULL)
                AND (r.rn > v_keep OR r.seq > r.held_from)))
       -- Re-checked on the newest row version: a claim may have leased it meanwhile.
       AND q.lock_token IS NULL AND q.held_due_at IS NULL AND q.due_at <= p_now
    RETURNING q.bot_id
  )
  SELECT count(*)::int INTO v_held FROM moved;
  -- Every bot that holds rows (one look per bot into webhook_queue_held_idx, skipping from bot to bot).
  WITH RECURSIVE b AS (
    (SELECT h.bot_id FROM webhook_queue h WHERE h.held_due_at IS NOT NULL ORDER BY h.bot_id LIMIT 1)
    UNION ALL
    SELECT (SELECT h.bot_id FROM webhook_queue h
             WHERE h.held_due_at IS NOT NULL AND h.bot_id > b.bot_id
             ORDER BY h.bot_id LIMIT 1)
      FROM b
     WHERE b.bot_id IS NOT NULL
  )
  SELECT array_agg(b.bot_id) INTO v_bots FROM b WHERE b.bot_id IS NOT NULL;
  RETURN QUERY SELECT v_held, CASE WHEN v_bots IS NULL THEN 0 ELSE webhook_unpark(p_now, v_bots, p_per_bot) END;
END $$;
