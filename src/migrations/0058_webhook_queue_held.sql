-- A bot's backlog no longer slows every claim (issue 34).
--
-- The claim reads its window of due rows oldest first from webhook_queue_due_idx and leaves out the
-- bots already at their bound anywhere in the deployment (0046, issue 32). A bot at its bound with a
-- backlog older than everyone else's (a receiver that hangs, or one slower than the bot's events)
-- sat at the head of that index, and every claim, for every bot, walked past all of its rows one by
-- one (each a heap fetch to read its bot): measured 6 ms per claim at 1,000 such rows and 24 ms at
-- 50,000, growing without bound with the bot's backlog.
--
-- Now such a bot's due rows beyond the first few are held back (webhook_park.sql): held_due_at keeps
-- their due time and due_at is 'infinity', out of every claim's window; they come back in event
-- order as the bot's slots free up (webhook_unpark.sql, called by every recording call for the bots
-- it recorded, and by the worker's periodic park call). The claim does not send a row of a bot that
-- has a held row earlier in event order, so holding never reorders a bot's deliveries.
ALTER TABLE webhook_queue ADD COLUMN held_due_at timestamptz;
-- A bot's held rows in event order: the first to come back, and the bots that have any.
CREATE INDEX webhook_queue_held_idx ON webhook_queue (bot_id, seq) WHERE held_due_at IS NOT NULL;
