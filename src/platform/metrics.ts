import { Counter, Gauge, type Metric, type MetricValueWithName, Registry } from 'prom-client';
import type { Db } from './db/port.ts';

// Prometheus metrics at /metrics. Labels never carry ids or secrets: routes are the route
// patterns (/api/v1/owner/bots/:bot_id), not the URLs.

export interface Metrics {
  registry: Registry;
  httpDuration: HttpDurationHistogram;
  checkoutDecisions: Counter<'outcome'>;
  deliveryAttempts: Counter<'result'>;
  webhookRoundTrips: Counter<'kind'>;
}

export function createMetrics(db: Db): Metrics {
  const registry = new Registry();
  const httpDuration = new HttpDurationHistogram(
    'botpay_http_request_duration_seconds',
    'HTTP request latency by route pattern, method and status code',
    HTTP_BUCKETS,
  );
  registry.registerMetric(httpDuration as unknown as Metric);
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

export const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

type HttpLabels = { method: string; route: string; status: string };

interface Series {
  labels: HttpLabels;
  status: number;
  /** Observations per bucket (not cumulative); the last slot counts those above every bound. */
  counts: number[];
  sum: number;
  count: number;
}

/**
 * The request latency histogram, observed on every request. prom-client's Histogram builds,
 * validates and hashes the label object on every observation (about a microsecond, a few per cent
 * of a cached status request); this one finds its series by route, method and status without building a key and counts into an
 * array, and produces prom-client's own values (buckets cumulative with `le`, `+Inf`, `_sum`,
 * `_count`) only when /metrics is read, through the same registry. `test/foundation/metrics.test.ts`
 * checks that its text equals a prom-client Histogram's fed the same observations.
 */
export class HttpDurationHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #series = new Map<string, Series[]>();
  /** Every series in the order they were first observed (as prom-client lists them). */
  #all: Series[] = [];
  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[],
  ) {}

  observe(method: string, route: string, status: number, seconds: number): void {
    // Route → its few series (by method and status): no key string is built per request.
    let ofRoute = this.#series.get(route);
    if (!ofRoute) {
      ofRoute = [];
      this.#series.set(route, ofRoute);
    }
    let series: Series | undefined;
    for (const s of ofRoute) {
      if (s.status === status && s.labels.method === method) {
        series = s;
        break;
      }
    }
    if (!series) {
      series = {
        labels: { method, route, status: String(status) },
        status,
        counts: new Array(this.buckets.length + 1).fill(0),
        sum: 0,
        count: 0,
      };
      ofRoute.push(series);
      this.#all.push(series);
    }
    const buckets = this.buckets;
    let i = 0;
    while (i < buckets.length && seconds > (buckets[i] as number)) i++;
    series.counts[i] = (series.counts[i] ?? 0) + 1;
    series.sum += seconds;
    series.count += 1;
  }

  /** What the registry formats (the shape of prom-client's own metrics' get()). */
  get(): {
    name: string;
    help: string;
    type: 'histogram';
    aggregator: 'sum';
    values: MetricValueWithName<string>[];
  } {
    const values: MetricValueWithName<string>[] = [];
    for (const { labels, counts, sum, count } of this.#all) {
      let cumulative = 0;
      this.buckets.forEach((le, i) => {
        cumulative += counts[i] ?? 0;
        values.push({ labels: { le, ...labels }, value: cumulative, metricName: `${this.name}_bucket` });
      });
      values.push({ labels: { le: '+Inf', ...labels }, value: count, metricName: `${this.name}_bucket` });
      values.push({ labels: { ...labels }, value: sum, metricName: `${this.name}_sum` });
      values.push({ labels: { ...labels }, value: count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: 'histogram', values, aggregator: 'sum' };
  }

  reset(): void {
    this.#series.clear();
    this.#all = [];
  }
}
