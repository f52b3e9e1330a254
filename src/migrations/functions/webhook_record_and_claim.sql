-- The delivery worker records a batch of finished attempts and claims the next batch in one round
-- trip and one transaction (src/webhooks/worker.ts). A lease is what counts against a bot's bound
-- across instances (webhook_claim), so a slot stays taken until its attempt is recorded; claiming
-- in the recording call hands it on at once instead of after a second round trip.
--
-- Recording (one statement, no lock beyond the rows it writes), for the attempts whose lease is
-- still this worker's (the queue row's lock_token): the queue row (0046) deleted when the delivery
-- is settled (delivered, or failed for good) or put back with its next due time for a retry, which
-- it decides from the queue row's attempts, so the wide delivery row is not read first; the delivery
-- row written once with the result (only unindexed columns change, so the update can stay on its
-- page: HOT, fillfactor 60, 0046); one webhook_attempts row per attempt; the bots' health. The
-- event row is not written (0052): the bot's message queue is read from the queue rows and the
-- deliveries failed for good (failed_at, set here, cleared by an owner's retry), so the bots whose
-- deliveries arrived are announced on botpay_bot_state here (their status's pending_messages
-- changed), once per call, as the events' statement trigger did when their delivered_at was written. After the n-th failed attempt (attempts = n - 1 before it) the next one is due
-- p_delays[n] seconds later; past the end of the list the delivery is failed. The recording
-- statement runs with botpay.webhook_queue = 'written' (set_config, local to the transaction, and
-- cleared right after it): it writes the queue itself, so the trigger that follows other writers of
-- a delivery's status (webhook_queue_sync) is not called for its writes. Not a SET clause of the
-- function: PostgreSQL lets only a superuser create a function that sets a custom parameter, and
-- the service's database user need not be one (docs/deploy.md).
-- Health: webhook_fail_count counts consecutive failed attempts (src/webhooks/health.ts, nextHealth
-- is the same rule in TypeScript); a success for an already healthy bot writes nothing.
--
-- Claiming: webhook_claim with the same arguments as when called on its own; p_room = 0 skips it
-- (no advisory lock is taken then). The claim's statements see the rows recorded just before (same
-- transaction), so the slots this call frees are available to it.
CREATE OR REPLACE FUNCTION webhook_record_and_claim(
  p_ids text[], p_tokens text[], p_ok boolean[], p_status integer[], p_excerpt text[], p_error text[],
  p_duration integer[], p_via text[], p_now timestamptz, p_delays integer[],
  p_health_bots text[], p_health_reset boolean[], p_health_failures integer[],
  p_degraded_after integer, p_unreachable_after integer,
  p_until timestamptz, p_token text, p_per_bot integer, p_room integer, p_skip text[], p_candidates integer)
RETURNS TABLE (id text, event_id text, bot_id text, event_type text, attempts integer, body text,
               callback_url text, tunnel_hostname text, webhook_path text, hooks_token_enc text,
               webhook_secret_enc text, webhook_secret_prev_enc text)
LANGUAGE plpgsql
-- Planned once per connection, not at every call (why: "Generic plans" in src/platform/db/migrate.ts).
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
#variable_conflict use_column
DECLARE
  v_recorded integer;
  v_delivered_bots text[];
  v_recorded_bots text[];
  v_keys text;
BEGIN
  IF cardinality(p_ids) > 0 THEN
    -- The bot rows whose health changes, locked in id order first: a worker runs two recording
    -- calls at once, and two calls (or two instances) updating the same bots in different orders
    -- would deadlock. A healthy bot whose attempts all succeeded is neither locked nor written.
    PERFORM 1
       FROM bots b JOIN unnest(p_health_bots, p_health_reset, p_health_failures) AS h(bot_id, reset, failures)
            ON b.id = h.bot_id
      WHERE NOT (h.reset AND h.failures = 0 AND b.webhook_status = 'active' AND b.webhook_fail_count = 0)
      ORDER BY b.id
        FOR UPDATE OF b;
    PERFORM set_config('botpay.webhook_queue', 'written', true);
    WITH v AS (
      SELECT * FROM unnest(p_ids, p_tokens, p_ok, p_status, p_excerpt, p_error, p_duration, p_via)
             AS v(id, token, ok, response_status, excerpt, error, duration_ms, via)
    ), settled AS (
      -- Delivered, or failed for good: the queue row goes. Only a lease still this worker's
      -- (lock_token, re-checked on the newest row version): a late result whose lease was taken
      -- over is left to the new holder.
      DELETE FROM webhook_queue q
       USING v
       WHERE q.delivery_id = v.id AND q.lock_token = v.token
         AND (v.ok OR p_delays[q.attempts + 1] IS NULL)
      RETURNING q.delivery_id, q.event_id, q.bot_id, q.attempts + 1 AS attempts, NULL::timestamptz AS next_at
    ), retried AS (
      -- A failed attempt with a retry to come: the queue row is due again after the delay.
      UPDATE webhook_queue q
         SET attempts = q.attempts + 1,
             due_at = p_now + make_interval(secs => p_delays[q.attempts + 1]),
             locked_until = NULL,
             lock_token = NULL
        FROM v
       WHERE q.delivery_id = v.id AND q.lock_token = v.token
         AND NOT v.ok AND p_delays[q.attempts + 1] IS NOT NULL
      RETURNING q.delivery_id, q.event_id, q.bot_id, q.attempts, q.due_at AS next_at
    ), done AS (
      SELECT x.delivery_id, x.event_id, x.bot_id, x.attempts, x.next_at, v.ok, v.response_status, v.excerpt, v.error,
             v.duration_ms, v.via
        FROM (SELECT * FROM settled UNION ALL SELECT * FROM retried) AS x JOIN v ON v.id = x.delivery_id
    ), upd AS (
      -- The delivery row, written once with the attempt's result. The attempt's number is the row's
      -- own count, as the attempts already logged for it are (webhook_attempts' key).
      UPDATE webhook_deliveries d
         SET attempts = d.attempts + 1,
             last_attempt_at = p_now,
             response_status = done.response_status,
             response_excerpt = done.excerpt,
             error = done.error,
             duration_ms = done.duration_ms,
             target = done.via,
             delivered_at = CASE WHEN done.ok THEN p_now ELSE d.delivered_at END,
             status = CASE
               WHEN done.ok THEN 'delivered'
               WHEN d.status <> 'pending' THEN d.status
               WHEN done.next_at IS NULL THEN 'failed'
               ELSE 'pending' END,
             next_attempt_at = coalesce(done.next_at, d.next_attempt_at),
             -- Failed for good: the delivery stays in the bot's message queue (0052). Unchanged
             -- (NULL) on a delivery or a retry, so their update stays HOT.
             failed_at = CASE
               WHEN done.ok THEN NULL
               WHEN d.status = 'pending' AND done.next_at IS NULL THEN p_now
               ELSE d.failed_at END
        FROM done
       WHERE d.id = done.delivery_id
      RETURNING d.id, d.attempts, done.ok, done.response_status, done.excerpt, done.error, done.duration_ms,
                done.via
    ), att AS (
      INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, ok, response_status, response_excerpt,
                                    error, duration_ms, target)
      SELECT upd.id, upd.attempts, p_now, upd.ok, upd.response_status, upd.excerpt, upd.error, upd.duration_ms,
             upd.via
        FROM upd
    ), health_set AS (
      -- Every attempt that really reached out counts, including a late one whose lease was taken
      -- over (its delivery row is left to the new holder), so this reads the inputs, not upd. The
      -- new count is computed from the bot row being updated, not from a snapshot read before it:
      -- when another call (another instance) updates the same bot first, PostgreSQL re-reads the
      -- newest row version after waiting for its lock and both calls' failures count.
      UPDATE bots b
         SET webhook_fail_count = CASE WHEN h.reset THEN h.failures ELSE b.webhook_fail_count + h.failures END,
             webhook_status = CASE
               WHEN CASE WHEN h.reset THEN h.failures ELSE b.webhook_fail_count + h.failures END >= p_unreachable_after
                 THEN 'unreachable'
               WHEN CASE WHEN h.reset THEN h.failures ELSE b.webhook_fail_count + h.failures END >= p_degraded_after
                    AND (h.reset OR b.webhook_status <> 'pending') THEN 'degraded'
               WHEN h.reset THEN 'active'
               ELSE b.webhook_status END
        FROM unnest(p_health_bots, p_health_reset, p_health_failures) AS h(bot_id, reset, failures)
       WHERE b.id = h.bot_id
         AND NOT (h.reset AND h.failures = 0 AND b.webhook_status = 'active' AND b.webhook_fail_count = 0)
    )
    SELECT (SELECT count(*)::int FROM upd),
           (SELECT array_agg(DISTINCT done.bot_id) FROM done WHERE done.ok),
           (SELECT array_agg(DISTINCT done.bot_id) FROM done)
      INTO v_recorded, v_delivered_bots, v_recorded_bots;
    PERFORM set_config('botpay.webhook_queue', '', true);
    -- The recorded bots' slots are free again: their held rows (0058), if any, come back in event
    -- order for the claim below (looked for only while some bot holds rows: nearly never).
    IF v_recorded_bots IS NOT NULL AND EXISTS (SELECT 1 FROM webhook_queue h WHERE h.held_due_at IS NOT NULL) THEN
      PERFORM webhook_unpark(p_now, v_recorded_bots, p_per_bot);
    END IF;
    -- In batches of 200 keys (a notification's payload holds under 8,000 bytes), as
    -- notify_bot_state_rows does.
    FOR v_keys IN
      SELECT string_agg('bot:' || k.bot_id, ',')
        FROM (SELECT u.bot_id, (row_number() OVER ()) / 200 AS chunk FROM unnest(v_delivered_bots) AS u(bot_id)) k
       GROUP BY k.chunk
    LOOP
      PERFORM botpay_notify('botpay_bot_state', v_keys);
    END LOOP;
  END IF;
  IF p_room > 0 THEN
    RETURN QUERY SELECT * FROM webhook_claim(p_now, p_until, p_token, p_per_bot, p_room, p_skip, p_candidates);
  END IF;
END $$;
