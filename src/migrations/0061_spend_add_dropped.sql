-- spend_add, the conditional upsert of one scope's spending windows, is gone: spend_run adds a
-- purchase's three counter rows with one conditional upsert of its own (src/migrations/functions/
-- spend_run.sql), each row under its own limits, so the rule now has that one definition. Nothing
-- else called spend_add: the previous version's instances call spend_run, whose body the function
-- files replace for every instance at once (docs/deploy.md). A copy for tests of earlier versions
-- is in test/foundation/fixtures/.
DROP FUNCTION IF EXISTS spend_add(text, bigint, timestamptz, bigint, timestamptz, bigint, timestamptz, bigint);
-- Its file is gone too (schema_functions, created by the first start-up, may not exist yet).
DO $$
BEGIN
  IF to_regclass('schema_functions') IS NOT NULL THEN
    DELETE FROM schema_functions WHERE name = 'spend_add';
  END IF;
END $$;
