-- spend_run takes one more parameter, p_announce (default true): false leaves the call's
-- announcements to its caller, which makes them after the commit without a NOTICE each
-- (spend_run.sql; src/spend/run.ts spendAlone). A function's parameter list is part of its
-- identity, so the function file would add a second spend_run beside this one, and a call naming
-- the previous parameters would then match both. The previous one goes first; the function file
-- creates the new one in this same transaction. A previous version's instance (rolling deploys)
-- names the previous parameters, which the new function takes with p_announce true: its calls
-- announce as before.
DROP FUNCTION IF EXISTS spend_run(
  text, text, text, integer, bigint, text, text, text, text, text, text,
  timestamptz, timestamptz, timestamptz, timestamptz, integer, text, text, text,
  text, integer, text, text, bigint, jsonb, boolean
);
