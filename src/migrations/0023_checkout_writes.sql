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

-- The Idempotency-Key of a card checkout is kept on its confirmation row instead of a row of its
-- own in checkout_idempotency: a keyed checkout inserted that row (2 index entries) and then
-- rewrote it with the encrypted response, beside the confirmation it belongs to. The answer is now
-- rebuilt from the confirmation and its card (the same fields; the card's digits and expiry never
-- change after activation), so only the key and the request's hash are kept, and no card digits
-- are stored. checkout_attempt (src/migrations/functions/) looks the key up under a transaction
-- advisory lock on (bot, key) and writes both columns. The unique index is partial: it holds keyed
-- confirmations only.
ALTER TABLE checkout_confirmations ADD COLUMN idempotency_key text;
ALTER TABLE checkout_confirmations ADD COLUMN request_hash text;
CREATE UNIQUE INDEX checkout_confirmations_idempotency_idx ON checkout_confirmations (bot_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
-- checkout_idempotency stays: x402 payments keep their keys there ('x402:<key>'), and card
-- checkouts keyed before this migration are answered from it for their remaining 24 hours. The
-- previous checkout_attempt (without the key and rate-limit parameters) stays too, for instances
-- of the previous version during a rolling deploy; the next migration may drop it.
