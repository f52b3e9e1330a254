-- Double entry: every ledger transaction's entries sum to zero, checked at commit by the deferred
-- constraint trigger ledger_entries_balanced (migration 0001), once per inserted entry. The one
-- definition (it replaced migration 0001's). Not queued for spend_run's own INSERT of a purchase's
-- two entries, balanced by construction (−amount and +amount of one value in one statement, run
-- with botpay.written_by = 'spend_run': migration 0055); every other INSERT is checked, the ones of
-- a transaction that also ran spend_run included (test/spend/ownRows.test.ts).
--
-- SET enable_seqscan = off: the sum is a lookup by transaction_id, always through
-- ledger_entries_transaction_idx. The plan is cached per connection, and one made while the
-- table's statistics described a small table (a young database after its first analyse) read the
-- whole table for every entry until the next analyse: in the checkout bench, a table grown from a
-- few hundred to five thousand entries within seconds of its statistics cost about 0.6 ms of
-- PostgreSQL's CPU per checkout (the chain's two entries each read it all). A scan of the whole
-- table is never the right plan for this query, whatever the statistics say.
CREATE OR REPLACE FUNCTION ledger_check_balanced() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off AS $$
DECLARE total bigint;
BEGIN
  SELECT coalesce(sum(amount_micros), 0) INTO total FROM ledger_entries WHERE transaction_id = NEW.transaction_id;
  IF total <> 0 THEN
    RAISE EXCEPTION 'ledger transaction % is not balanced (sum %)', NEW.transaction_id, total
      USING ERRCODE = '23514';
  END IF;
  RETURN NULL;
END $$;
