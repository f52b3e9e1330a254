-- Which instance holds each bot's tunnel WebSocket (src/tunnels/cluster.ts). The instance a tunnel
-- client connected to writes its row (a new connection always takes the row over, with a new epoch
-- from the sequence, so the newest connection wins and the row's epoch only grows), renews
-- expires_at while it holds the socket, and deletes the row when the socket closes. An instance that
-- dies stops renewing: after expires_at nobody forwards to it. Other instances read the row to
-- forward a request for the hostname to internal_url. Used on PostgreSQL only (on the embedded
-- database there is one instance and the table stays empty).
CREATE SEQUENCE tunnel_lease_epochs;

CREATE TABLE tunnel_leases (
  hostname text PRIMARY KEY,
  bot_id text NOT NULL REFERENCES bots(id) ON DELETE CASCADE,
  instance_id text NOT NULL,
  internal_url text NOT NULL,
  epoch bigint NOT NULL,
  acquired_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
