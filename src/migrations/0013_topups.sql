-- Top-up requests (src/topups/): a bot asks its owner for funds; the owner approves (the card
-- wallet is funded in the same transaction) or declines. A request is decided once: pending →
-- approved | declined | expired. owner_id is the owner when the bot asked (a request never moves
-- to another owner). funding_id names the ledger reference of the approval's funding.
CREATE TABLE topup_requests (
  id text PRIMARY KEY,
  bot_id text NOT NULL REFERENCES bots(id),
  owner_id text NOT NULL REFERENCES owners(id),
  amount_cents bigint NOT NULL CHECK (amount_cents > 0),
  reason text NOT NULL,
  status text NOT NULL CHECK (status IN ('pending', 'approved', 'declined', 'expired')),
  approved_cents bigint CHECK (approved_cents > 0),
  funding_id text,
  note text,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  decided_at timestamptz,
  decided_by text,
  -- The owner e-mail about the request (src/notifications/job.ts): claim lease and sent mark.
  owner_mail_at timestamptz,
  owner_mailed_at timestamptz,
  CHECK ((status = 'approved') = (approved_cents IS NOT NULL))
);
CREATE INDEX topup_requests_bot_idx ON topup_requests (bot_id, created_at DESC);
CREATE INDEX topup_requests_owner_pending_idx ON topup_requests (owner_id, created_at) WHERE status = 'pending';
CREATE INDEX topup_requests_due_idx ON topup_requests (expires_at) WHERE status = 'pending';
CREATE INDEX topup_requests_owner_mail_idx ON topup_requests (created_at)
  WHERE status = 'pending' AND owner_mailed_at IS NULL;

-- pending_topups is part of the bot's status and wallet check: every change drops the cached copies
-- (src/bots/stateCache.ts) like the other tables those answers read.
CREATE TRIGGER topup_requests_state AFTER INSERT OR UPDATE OR DELETE ON topup_requests
  FOR EACH ROW EXECUTE FUNCTION notify_bot_state();
