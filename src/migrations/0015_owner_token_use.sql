-- Owner API tokens managed from the dashboard and the owner API (issue 15): when a token was last
-- used (written at most once a minute per token), and the owner's tokens listed newest first.
ALTER TABLE owner_tokens ADD COLUMN last_used_at timestamptz;
CREATE INDEX owner_tokens_owner_idx ON owner_tokens (owner_id, created_at DESC);
