-- Several purchases in one transaction: group commit for spend_run (src/spend/batch.ts, the one
-- caller). Each item is one call of spend_run with the parameters it would have had alone, by name
-- (p_items: a jsonb array of objects keyed by spend_run's parameter names, as src/spend/run.ts
-- spendCall maps them), run in a subtransaction of its own: a refusal (BP001), a purchase that
-- needs the caller's transaction (BP002) or any other error undoes that item's writes only, as its
-- own statement would have, and is answered in its place. One commit, one round trip and one
-- warm backend for them all: what a checkout spends outside its own rows (the transaction's start
-- and commit, the WAL flush, the socket, the executor's first-call costs) is shared.
--
-- Answer: a jsonb array in p_items' order, each element one of
--   {"r": <spend_run's answer>}                  passed or replayed, written with the others;
--   {"sqlstate": "BP001", "message": <refusal>}  refused, nothing of it written;
--   {"sqlstate": <other>, "message": …}          failed, nothing of it written (the caller runs it
--                                                again on its own, where the error is answered as
--                                                it always was: BP002 → a transaction, others →
--                                                thrown);
--   {"later": true}                              not run: another item of the same owner ran in
--                                                this batch (the caller runs it in the next).
--
-- Locks. One purchase takes its rows in spend_run's one global order (its bot's key and rate-limit
-- row, card or x402 counter → owner → bot counters, wallet row last), and every row a purchase locks
-- belongs to its bot's owner. Two purchases of one owner in one transaction could interleave with
-- another transaction's purchase of that owner (this batch holds the owner's counter row from its
-- first item and waits for the second item's rate-limit row, which the other holds while it waits
-- for the owner's row): so a batch runs at most one item per owner, and runs them in the order of
-- their owners' ids. Every transaction that runs purchases then takes its locks in one order
-- (owner, then spend_run's order), and batches cannot deadlock with each other or with a purchase
-- alone. A transaction of another kind that locks rows of several owners could still meet a batch
-- in a deadlock: PostgreSQL detects it and one side fails with 40P01 — this side's item is answered
-- as failed and run again alone, the other side's transaction is retried (Db.transaction) — so a
-- deadlock costs time, never a wrong answer.
--
-- Of one owner's items the first in p_items runs (the caller puts the oldest first, so none waits
-- for ever). Bots without an owner (refused wallet_not_active by spend_run, which then holds none of
-- their rows) come last.
-- The owner read here is a snapshot, not a lock: a bot claimed meanwhile only changes the order,
-- and an order broken that way ends in the deadlock case above.
--
-- At most 64 items (src/spend/batch.ts keeps to 32): each writing item is one subtransaction, and
-- PostgreSQL keeps 64 per backend in shared memory before other sessions' snapshots get slower.
CREATE OR REPLACE FUNCTION spend_run_batch(p_items jsonb) RETURNS jsonb LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  it record;
  v jsonb;
  answers jsonb[];
  last_owner text;
BEGIN
  IF jsonb_typeof(p_items) IS DISTINCT FROM 'array' OR jsonb_array_length(p_items) > 64 THEN
    RAISE EXCEPTION 'spend_run_batch: expected an array of at most 64 items';
  END IF;
  answers := array_fill(NULL::jsonb, ARRAY[jsonb_array_length(p_items)]);
  FOR it IN
    SELECT i.ord, i.v, b.owner_id
      FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(v, ord)
      LEFT JOIN bots b ON b.id = i.v->>'p_bot_id'
     ORDER BY b.owner_id NULLS LAST, i.ord
  LOOP
    IF it.owner_id IS NOT NULL AND it.owner_id = last_owner THEN
      answers[it.ord] := '{"later": true}';
      CONTINUE;
    END IF;
    last_owner := it.owner_id;
    v := it.v;
    BEGIN
      answers[it.ord] := jsonb_build_object('r', spend_run(
        p_method => v->>'p_method', p_bot_id => v->>'p_bot_id', p_card_id => v->>'p_card_id',
        p_profile_index => (v->>'p_profile_index')::integer, p_amount => (v->>'p_amount')::bigint,
        p_category => v->>'p_category', p_id => v->>'p_id', p_merchant_name => v->>'p_merchant_name',
        p_merchant_url => v->>'p_merchant_url', p_item_name => v->>'p_item_name', p_task_id => v->>'p_task_id',
        p_now => (v->>'p_now')::timestamptz, p_day => (v->>'p_day')::timestamptz,
        p_week => (v->>'p_week')::timestamptz, p_month => (v->>'p_month')::timestamptz,
        p_window_seconds => (v->>'p_window_seconds')::integer, p_ledger_id => v->>'p_ledger_id',
        p_event_id => v->>'p_event_id', p_event_body => v->>'p_event_body', p_rate_key => v->>'p_rate_key',
        p_rate_limit => (v->>'p_rate_limit')::integer, p_idempotency_key => v->>'p_idempotency_key',
        p_request_hash => v->>'p_request_hash', p_low_balance_micros => (v->>'p_low_balance_micros')::bigint,
        p_payment => (v->>'p_payment')::jsonb, p_domain_refused => (v->>'p_domain_refused')::boolean,
        p_announce => (v->>'p_announce')::boolean));
    EXCEPTION WHEN OTHERS THEN
      answers[it.ord] := jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM);
    END;
  END LOOP;
  RETURN to_jsonb(answers);
END $$;
