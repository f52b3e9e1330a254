-- A bucket row's running total (rate_limit_consume.sql): the requests its window counted at the
-- bucket of its last counted request (last_at). A request in that same bucket is then counted
-- against it in one statement, instead of adding up the 61 slots again (a loop of the function's,
-- under the key's row lock, at every request of a key above 100 an hour). NULL until a request
-- keeps it (and after rate_limit_release changes a slot): such a request adds the slots up, as
-- before.
ALTER TABLE rate_limits ADD COLUMN bucket_total integer;
