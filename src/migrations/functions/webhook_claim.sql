-- The delivery worker's claim in one round trip (src/webhooks/worker.ts; it was BEGIN, lock,
-- claim, COMMIT). Claims are serialised across instances by a transaction-scoped advisory lock
-- (7254003 with the schema's hash), and in READ COMMITTED each statement of a volatile PL/pgSQL function takes a fresh
-- snapshot: the claim after the lock sees every lease committed before it, so the per-bot count
-- of leased rows (every instance's) is exact and two instances cannot both take a bot's last slot.
--   p_per_bot     leases a bot may hold in the whole deployment
--   p_room        rows this caller may take (its free slots)
--   p_skip        bots the caller already fills by itself (need no look)
--   p_candidates  due rows looked at
-- Bots already at p_per_bot anywhere in the deployment are left out of the candidates too: their due
-- rows cannot be claimed now, and a hanging receiver's backlog (older than everyone else's rows)
-- would otherwise fill the window of every claim on the instances that do not hold its leases
-- themselves (p_skip is only the caller's own), so healthy bots would wait for its attempts to time
-- out (issue 32, test/webhooks/fairness.test.ts).
-- Order: each bot's due rows are taken in event order (seq, the events' sequence copied onto the
-- delivery row, 0040, and onto its queue row), and returned in that order, so each bot's sends
-- start in the order its events were written, also within one millisecond
-- (test/webhooks/order.test.ts).
-- Tables: the claim reads and leases rows of webhook_queue (0046: one narrow row per pending
-- delivery, with its event, attempts, due time and lease) and writes nothing else; the event and bot
-- rows are only read, for what the send needs, and the wide delivery row not at all.
CREATE OR REPLACE FUNCTION webhook_claim(p_now timestamptz, p_until timestamptz, p_token text, p_per_bot integer,
                              p_room integer, p_skip text[], p_candidates integer)
RETURNS TABLE (id text, event_id text, bot_id text, event_type text, attempts integer, body text,
               callback_url text, tunnel_hostname text, webhook_path text, hooks_token_enc text,
               webhook_secret_enc text, webhook_secret_prev_enc text)
LANGUAGE plpgsql
-- Planned once per connection, not at every call (why: "Generic plans" in src/platform/db/migrate.ts).
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
#variable_conflict use_column
BEGIN
  PERFORM pg_advisory_xact_lock(7254003, hashtext(current_schema()));
  RETURN QUERY
  WITH any_held AS MATERIALIZED (
    -- Whether any bot holds rows at all (0058; one look into the nearly always empty
    -- webhook_queue_held_idx): only then is each bot's first held row looked up below.
    SELECT EXISTS (SELECT 1 FROM webhook_queue h WHERE h.held_due_at IS NOT NULL) AS yes
  ), full_bots AS (
    -- Every live lease in the deployment, through webhook_queue_leased_idx (only rows under a lease
    -- are in it, at most the instances' slots and the expired leases not yet taken back): the bots
    -- at their bound.
    SELECT l.bot_id
      FROM webhook_queue l
     WHERE l.lock_token IS NOT NULL AND l.locked_until > p_now
     GROUP BY l.bot_id
    HAVING count(*) >= p_per_bot
  ), due AS (
    -- The window: due rows oldest first. Rows not under a lease come from webhook_queue_due_idx
    -- (due_at, seq; leased rows have no entry in it) in its order, so rows due in the same
    -- millisecond enter it in event order and a window that cuts through them keeps the earliest;
    -- rows whose lease expired (their worker died) from webhook_queue_leased_idx.
    SELECT w.delivery_id, w.bot_id, w.seq
      FROM ((SELECT q.delivery_id, q.bot_id, q.seq, q.due_at
               FROM webhook_queue q
              WHERE q.lock_token IS NULL AND q.due_at <= p_now
                AND NOT (q.bot_id = ANY(p_skip))
                AND NOT (q.bot_id = ANY(ARRAY(SELECT f.bot_id FROM full_bots f)))
              ORDER BY q.due_at, q.seq
              LIMIT p_candidates)
            UNION ALL
            (SELECT q.delivery_id, q.bot_id, q.seq, q.due_at
               FROM webhook_queue q
              WHERE q.lock_token IS NOT NULL AND q.locked_until <= p_now AND q.due_at <= p_now
                AND NOT (q.bot_id = ANY(p_skip))
                AND NOT (q.bot_id = ANY(ARRAY(SELECT f.bot_id FROM full_bots f)))
              ORDER BY q.due_at, q.seq
              LIMIT p_candidates)) AS w
     ORDER BY w.due_at, w.seq
     LIMIT p_candidates
  ), ordered AS (
    -- Each bot's free slots go to its due rows in event order (seq: the order the events were
    -- written, 0040), not by id: ids order by millisecond only, and within one their order is random.
    SELECT due.delivery_id, due.bot_id, due.seq,
           row_number() OVER (PARTITION BY due.bot_id ORDER BY due.seq, due.delivery_id) AS rn
      FROM due
  ), counted AS (
    -- In flight anywhere in the deployment: the bot's rows under a live lease (every instance's),
    -- read through webhook_queue_leased_idx, counted up to p_per_bot (a bot with that many has no
    -- room, whatever the rest), once per bot: on its first due row (the subquery in a CASE branch
    -- runs only when the branch is taken), spread to the bot's other rows below. No join of the due
    -- rows with a per-bot table: with the generic plan's estimates that was a nested loop of due
    -- rows × bots. A plain index scan in the index's order: unlike a bitmap scan it marks the
    -- entries of lease versions already dead, so later claims skip them.
    SELECT o.delivery_id, o.bot_id, o.rn,
           CASE WHEN o.rn = 1 THEN
             (SELECT count(*)::int
                FROM (SELECT 1 FROM webhook_queue l
                       WHERE l.bot_id = o.bot_id AND l.lock_token IS NOT NULL AND l.locked_until > p_now
                       ORDER BY l.locked_until
                       LIMIT p_per_bot) AS live)
           END AS busy,
           -- The bot's first held row in event order (0058, webhook_park.sql), if it holds any: its
           -- rows after that one wait until the held rows are back (webhook_unpark), so that holding
           -- never reorders a bot's sends. One look into webhook_queue_held_idx per bot, and only
           -- while some bot holds rows.
           CASE WHEN o.rn = 1 AND (SELECT a.yes FROM any_held a) THEN
             (SELECT h.seq FROM webhook_queue h
               WHERE h.bot_id = o.bot_id AND h.held_due_at IS NOT NULL
               ORDER BY h.seq
               LIMIT 1)
           END AS held_from,
           o.seq
      FROM ordered o
  ), ranked AS (
    SELECT c.delivery_id, c.seq, c.rn + max(c.busy) OVER (PARTITION BY c.bot_id) AS slot,
           max(c.held_from) OVER (PARTITION BY c.bot_id) AS held_from
      FROM counted c
  ), picked AS (
    -- The ranked rows with a free slot, fetched by primary key as one array (`= ANY`): a plan that
    -- stays cheap with or without statistics. A join with the ranked rows was planned, from the
    -- generic plan's estimates, as a nested loop that compared every due row with every ranked one
    -- (37,000 comparisons for a claim of 128 rows, half the claim's time; EXPLAIN of 2026-11-27).
    SELECT q.delivery_id
      FROM webhook_queue q
     WHERE q.delivery_id = ANY (ARRAY(SELECT r.delivery_id FROM ranked r
                                       WHERE r.slot <= p_per_bot AND (r.held_from IS NULL OR r.seq < r.held_from)))
       -- Re-checked on the locked row version: another worker may have claimed it meanwhile.
       AND q.due_at <= p_now
       AND (q.lock_token IS NULL OR q.locked_until <= p_now)
     -- In event order: when p_room cuts, each bot keeps its earliest rows (a prefix of its order).
     ORDER BY q.seq, q.delivery_id
     LIMIT p_room
     FOR UPDATE OF q SKIP LOCKED
  ), claimed AS (
    UPDATE webhook_queue q
       SET locked_until = p_until, lock_token = p_token
      FROM picked
     WHERE q.delivery_id = picked.delivery_id
    RETURNING q.delivery_id, q.event_id, q.bot_id, q.attempts, q.seq
  )
  -- What each send needs, from the queue row, its event and its bot (read by primary key; the wide
  -- delivery row is not read), in event order, so the worker starts each bot's sends in the order of
  -- its events.
  SELECT c.delivery_id, c.event_id, c.bot_id, e.type, c.attempts, e.body, b.callback_url, b.tunnel_hostname,
         b.webhook_path, b.hooks_token_enc, b.webhook_secret_enc,
         CASE WHEN b.webhook_secret_prev_until > p_now THEN b.webhook_secret_prev_enc END
    FROM claimed c
    JOIN events e ON e.id = c.event_id
    JOIN bots b ON b.id = c.bot_id
   ORDER BY c.seq, c.delivery_id;
END $$;
