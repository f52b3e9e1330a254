-- One-time messages of the dashboard (post/redirect/get): a POST that produces something to show
-- once (a new API key, a webhook secret, a pairing code, the address a sign-in link went to)
-- stores it here, encrypted, and redirects to a page with the row's random id. That GET takes the
-- row with DELETE … RETURNING, so a reload shows it no more and repeats nothing.
CREATE TABLE dashboard_flashes (
  id text PRIMARY KEY,
  -- SHA-256 of the session (or pre-sign-in cookie) it was made for: no one else can take it.
  holder_hash text NOT NULL,
  payload_enc text NOT NULL,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);
CREATE INDEX dashboard_flashes_expiry_idx ON dashboard_flashes (expires_at);
