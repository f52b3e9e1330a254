-- Fewer writes per checkout (issue 17), continued from 0020.
--
-- Indexes no query uses, each written by every purchase. Checked with the queries of src (every
-- statement that reads these tables) and pg_stat_user_indexes after the checkout suite on
-- PostgreSQL.
--
-- checkout_confirmations (card_id, created_at, id) WHERE is_real: left from the decoy pacing
-- engine that 0010 removed (0 scans); every real purchase wrote an entry in it.
DROP INDEX checkout_confirmations_card_real_idx;
-- events (bot_id, created_at): the service reads a bot's events only for its undelivered ones
-- (the messages API and the bot's status, both served by events_undelivered_idx); otherwise events
-- are read by id, walked by seq (retention), or found by the owner-mail index. Its scans came from
-- tests' own queries. Bots are never deleted, so the foreign key to bots needs no index on this
-- side. Every event wrote an entry in it.
DROP INDEX events_bot_idx;
