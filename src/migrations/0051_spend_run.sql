-- One guardrail chain for both rails (issue 30): checkout_run (the card's chain) is replaced by
-- spend_run (src/migrations/functions/spend_run.sql), which runs the same chain for a card
-- purchase and for an x402 payment, the payment method the only thing that differs. The old
-- function goes here, so no second definition of the chain stays in a database; its function file
-- is gone, and so is its row in schema_functions (the table exists only once function files were
-- applied: on a new database they run after every migration).
DROP FUNCTION IF EXISTS checkout_run(text, text, integer, bigint, text, text, text, text, text, text, timestamptz,
  timestamptz, timestamptz, timestamptz, integer, text, text, text, text, integer, text, text, bigint);
DO $$
BEGIN
  IF to_regclass('schema_functions') IS NOT NULL THEN
    DELETE FROM schema_functions WHERE name = 'checkout_run';
  END IF;
END $$;
