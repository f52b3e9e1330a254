-- Brings a bot's held deliveries (0058, webhook_park.sql) back into the claim's window, earliest in
-- event order first, until the bot has 2 × p_per_bot rows ready: due now, not under a lease, and
-- before its first held row in event order (only those may be sent: webhook_claim). Called for the
-- bots whose attempts a recording call has just written (webhook_record_and_claim: their slots were
-- freed, so their next rows are ready for the claim that follows in the same call) and by the
-- periodic park call for every bot that holds rows (an acknowledgement, an owner's retry or an
-- expired lease also changes what is ready). The rows come back due at their own due time, which
-- is past, so they are at the head of the window. Returns the number of rows brought back.
-- Cost: per bot, one look into webhook_queue_held_idx (nearly always empty) and, for a bot that
-- holds rows, a look at its rows before the first held one (its leases, its ready rows and its
-- retries not yet due).
CREATE OR REPLACE FUNCTION webhook_unpark(p_now timestamptz, p_bots text[], p_per_bot integer)
RETURNS integer
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_keep integer := 2 * p_per_bot;
  v_bot text;
  v_from bigint;
  v_ready integer;
  v_moved integer;
  v_total integer := 0;
BEGIN
  -- In id order: two calls (two recording calls of one worker, or two instances) lock the rows of
  -- the same bots in the same order.
  FOR v_bot IN SELECT DISTINCT u.bot_id FROM unnest(p_bots) AS u(bot_id) WHERE u.bot_id IS NOT NULL ORDER BY 1
  LOOP
    SELECT h.seq INTO v_from
      FROM webhook_queue h
     WHERE h.bot_id = v_bot AND h.held_due_at IS NOT NULL
     ORDER BY h.seq
     LIMIT 1;
    CONTINUE WHEN v_from IS NULL;
    SELECT count(*)::int INTO v_ready
      FROM (SELECT 1 FROM webhook_queue q
             WHERE q.bot_id = v_bot AND q.seq < v_from AND q.lock_token IS NULL AND q.held_due_at IS NULL
               AND q.due_at <= p_now
             LIMIT v_keep) AS r;
    CONTINUE WHEN v_ready >= v_keep;
    UPDATE webhook_queue q
       SET due_at = q.held_due_at, held_due_at = NULL
     WHERE q.delivery_id = ANY (ARRAY(
             SELECT h.delivery_id FROM webhook_queue h
              WHERE h.bot_id = v_bot AND h.held_due_at IS NOT NULL
              ORDER BY h.seq
              LIMIT v_keep - v_ready))
       AND q.held_due_at IS NOT NULL;
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    v_total := v_total + v_moved;
  END LOOP;
  RETURN v_total;
END $$;
