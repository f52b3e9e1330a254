-- One idempotency mechanism for both rails (issue 30): the Idempotency-Key of an x402 payment is
-- kept on its x402_payments row, with the request's hash, as a card checkout's is on its
-- confirmation (0023). spend_run (src/migrations/functions/spend_run.sql) looks the key up under
-- the same transaction advisory lock on (bot, key) and writes both columns; a replay is rebuilt
-- from the row (its stored requirement, the confirmation's expiry when it was held, the signed
-- payload already kept encrypted in payload_enc), so no response is stored any more. Keys are
-- honoured for 24 hours; an older row gives its key up. The unique index is partial: it holds
-- keyed payments only.
--
-- checkout_idempotency stays for two things: x402 payments keyed before this migration ('x402:<key>',
-- encrypted responses) are answered from it for their remaining 24 hours (src/spend/idempotency.ts),
-- and the fetch mode's final answers (src/x402/fetch.ts: the resource the service fetched, which no
-- row can rebuild), pruned by the retention job.
ALTER TABLE x402_payments ADD COLUMN idempotency_key text;
ALTER TABLE x402_payments ADD COLUMN request_hash text;
CREATE UNIQUE INDEX x402_payments_idempotency_idx ON x402_payments (bot_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
