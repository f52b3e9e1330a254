-- Owner mail from durable rows (src/notifications/): a real purchase held for approval and a
-- wallet.balance_low event are mailed to the owner by a job, not after the checkout's commit, so a
-- crash between the two loses nothing. owner_mail_at is the claim lease (and the retry time),
-- owner_mailed_at marks the mail as sent; the Message-ID is derived from the row's id, so a mail
-- sent twice after a crash mid-send is one message to the receiving server.
ALTER TABLE checkout_confirmations ADD COLUMN owner_mail_at timestamptz;
ALTER TABLE checkout_confirmations ADD COLUMN owner_mailed_at timestamptz;
ALTER TABLE events ADD COLUMN owner_mail_at timestamptz;
ALTER TABLE events ADD COLUMN owner_mailed_at timestamptz;
-- Nothing that exists now is mailed again.
UPDATE checkout_confirmations SET owner_mailed_at = now() WHERE is_real AND status = 'pending';
UPDATE events SET owner_mailed_at = now() WHERE type = 'wallet.balance_low';
CREATE INDEX checkout_confirmations_owner_mail_idx ON checkout_confirmations (created_at)
  WHERE is_real AND status = 'pending' AND owner_mailed_at IS NULL;
CREATE INDEX events_owner_mail_idx ON events (created_at)
  WHERE type = 'wallet.balance_low' AND owner_mailed_at IS NULL;

-- A bot's deliveries in flight anywhere in the deployment (rows under a lease): what the delivery
-- worker's claim counts to keep the per-bot bound across instances (src/webhooks/worker.ts).
CREATE INDEX webhook_deliveries_leased_idx ON webhook_deliveries (bot_id, locked_until)
  WHERE locked_until IS NOT NULL;
