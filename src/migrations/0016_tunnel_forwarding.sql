-- What the managed tunnel forwards to the bot's machine (src/tunnels/). 'webhook_only' (the default,
-- also for existing bots): POST requests to the bot's webhook_path, nothing else, so a passer-by who
-- knows the hostname cannot reach other services on the bot's local port. 'all': any method and
-- path, when the owner allows it (owner API PATCH /api/v1/owner/bots/{bot_id}/tunnel).
ALTER TABLE bots ADD COLUMN tunnel_forward text NOT NULL DEFAULT 'webhook_only'
  CHECK (tunnel_forward IN ('webhook_only', 'all'));
