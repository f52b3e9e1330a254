-- Dashboard sign-in: e-mail magic links and browser sessions. Both secrets are stored only as
-- SHA-256 hashes; the raw values exist in the e-mail and the cookie.

CREATE TABLE magic_links (
  token_hash text PRIMARY KEY,
  email text NOT NULL,
  email_normalized text NOT NULL,
  -- Where to go after signing in (may hold a claim link, so it is encrypted with SECRET_KEY).
  return_to_enc text,
  requested_ip text,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  used_at timestamptz
);
CREATE INDEX magic_links_expiry_idx ON magic_links (expires_at);

CREATE TABLE owner_sessions (
  id_hash text PRIMARY KEY,
  owner_id text NOT NULL REFERENCES owners(id),
  created_at timestamptz NOT NULL,
  last_seen_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  revoked_at timestamptz,
  ip text,
  user_agent text
);
CREATE INDEX owner_sessions_owner_idx ON owner_sessions (owner_id);
CREATE INDEX owner_sessions_expiry_idx ON owner_sessions (expires_at);
