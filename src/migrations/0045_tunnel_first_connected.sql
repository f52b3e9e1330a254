-- A bot whose managed tunnel has never connected is waiting for its tunnel client, not failing:
-- its deliveries wait (next_attempt_at set to the far-future sentinel of src/webhooks/tunnelWait.ts,
-- no attempt counted) until the client connects, which sets tunnel_connected_at and makes them due.
-- Once a tunnel has connected, a tunnel that is down again counts as failed attempts (the bot
-- worked and stopped: the owner should see it degrade).
ALTER TABLE bots ADD COLUMN tunnel_connected_at timestamptz;

-- Tunnel bots that already worked, or hold a lease now, have connected.
UPDATE bots b SET tunnel_connected_at = now()
 WHERE b.tunnel_hostname IS NOT NULL
   AND (b.webhook_status IN ('active', 'degraded')
        OR EXISTS (SELECT 1 FROM tunnel_leases l WHERE l.bot_id = b.id)
        OR EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.bot_id = b.id AND d.status = 'delivered'));
