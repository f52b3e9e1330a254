// The bot's message queue: its events neither delivered by webhook nor acknowledged
// (GET /api/v1/bot/messages, the status's pending_messages).

/**
 * The event ids of a bot's message queue, as a subquery on the bot id `botIdExpr` (migration 0052):
 * its pending deliveries (exactly those with a webhook_queue row) and those failed for good
 * (failed_at, re-checked against the status), each through an index on (bot_id, seq). The caller
 * leaves out acknowledged events (events.acked_at). A delivery does not write its event: neither
 * index covers a column its recording changes on the delivery row.
 */
export function messageQueueEventIdsSql(botIdExpr: string): string {
  return `(SELECT q.event_id FROM webhook_queue q WHERE q.bot_id = ${botIdExpr}
           UNION ALL
           SELECT d.event_id FROM webhook_deliveries d
            WHERE d.bot_id = ${botIdExpr} AND d.failed_at IS NOT NULL AND d.status = 'failed')`;
}
