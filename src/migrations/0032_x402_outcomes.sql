-- x402 payments (docs/x402.md): sellers on x402 v1, the service making the resource request itself,
-- and sellers that refuse a payment.
--
-- status 'refused': the seller refused the signed authorisation and the reference facilitator's
-- verification, run by the service against the chain, found that it can never move money (for
-- example a signature made for another EIP-712 domain); its amount went back to spendable at once.
-- x402_version: 1 for a seller on x402 v1 (X-PAYMENT, network names such as base-sepolia).
-- domain_check: how the resource's host was known when the owner's domain lists were judged:
-- 'claimed' (the bot said so; no list applied), 'probed' (the service fetched the named resource and
-- saw it ask for this payment), 'connected' (the service made the request itself:
-- POST /api/v1/bot/x402/fetch).
-- announced_at: when purchase.approved was sent for the payment. An automatically approved
-- payment announces it once the seller took it (its answer to the service's own request, or the
-- chain), so a refused one never does; held ones announce it at the owner's approval.

ALTER TABLE x402_payments DROP CONSTRAINT IF EXISTS x402_payments_status_check;
ALTER TABLE x402_payments ADD CONSTRAINT x402_payments_status_check CHECK (status IN
  ('pending', 'denied', 'expired', 'authorized', 'settled', 'lapsed', 'refused'));
ALTER TABLE x402_payments ADD COLUMN x402_version smallint NOT NULL DEFAULT 2 CHECK (x402_version IN (1, 2));
ALTER TABLE x402_payments ADD COLUMN domain_check text NOT NULL DEFAULT 'claimed'
  CHECK (domain_check IN ('claimed', 'probed', 'connected'));
ALTER TABLE x402_payments ADD COLUMN announced_at timestamptz;
ALTER TABLE x402_payments ADD COLUMN refusal_reason text;
-- Payments signed before this migration announced purchase.approved when they were signed.
UPDATE x402_payments SET announced_at = coalesce(authorized_at, created_at)
 WHERE status IN ('authorized', 'settled', 'lapsed');

