-- Webhook secret rotation with an overlap window: after a rotation the previous secret keeps
-- signing (next to the new one, in the Standard Webhooks `webhook-signature` header) until
-- webhook_secret_prev_until, so a receiver can switch secrets without losing deliveries.
ALTER TABLE bots ADD COLUMN webhook_secret_prev_enc text;
ALTER TABLE bots ADD COLUMN webhook_secret_prev_until timestamptz;
