import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Db } from './db/port.ts';

// Prometheus metrics at /metrics. Labels never carry ids or secrets: routes are the route
// patterns (/api/v1/owner/bots/:bot_id), not the URLs.

export interface Metrics {
  registry: Registry;
  httpDuration: Histogram<'method' | 'route' | 'status'>;
  checkoutDecisions: Counter<'outcome'>;
  deliveryAttempts: Counter<'result'>;
  webhookRoundTrips: Counter<'kind'>;
}

export function createMetrics(db: Db): Metrics {
  const registry = new Registry();
  const httpDuration = new Histogram({
    name: 'botpay_http_request_duration_seconds',
    help: 'HTTP request latency by route pattern, method and status code',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const checkoutDecisions = new Counter({
    name: 'botpay_checkout_decisions_total',
    help: 'Checkout requests by outcome (approved, pending, or the error code)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const deliveryAttempts = new Counter({
    name: 'botpay_webhook_delivery_attempts_total',
    help: 'Webhook delivery attempts by result (delivered, failed_attempt, refused)',
    labelNames: ['result'] as const,
    registers: [registry],
  });
  const webhookRoundTrips = new Counter({
    name: 'botpay_webhook_worker_round_trips_total',
    help: 'Database round trips of the webhook delivery worker by kind (claim, record)',
    labelNames: ['kind'] as const,
    registers: [registry],
  });
  new Gauge({
    name: 'botpay_events_undelivered',
    help: 'Events not yet delivered nor acknowledged (queue depth)',
    registers: [registry],
    async collect() {
      this.set(
        await scalar(
          db,
          'SELECT count(*)::int AS v FROM events WHERE delivered_at IS NULL AND acked_at IS NULL',
        ),
      );
    },
  });
  new Gauge({
    name: 'botpay_events_oldest_undelivered_age_seconds',
    help: 'Age of the oldest event not yet delivered nor acknowledged',
    registers: [registry],
    async collect() {
      this.set(
        await scalar(
          db,
          `SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS v
             FROM events WHERE delivered_at IS NULL AND acked_at IS NULL`,
        ),
      );
    },
  });
  return { registry, httpDuration, checkoutDecisions, deliveryAttempts, webhookRoundTrips };
}

async function scalar(db: Db, sql: string): Promise<number> {
  try {
    const rows = await db.query<{ v: number }>(sql);
    return Number(rows[0]?.v ?? 0);
  } catch {
    return Number.NaN;
  }
}
