import { Counter, Gauge, type Metric, type MetricValueWithName, Registry } from 'prom-client';
import { WAIT_BUCKETS } from './db/gate.ts';
import type { Db } from './db/port.ts';
import { spendQueueLoad } from '../spend/run.ts';
import { EVENT_LOOP_BUCKETS, EventLoopMonitor } from './overload.ts';

// Prometheus metrics at /metrics. Labels never carry ids or secrets: routes are the route
// patterns (/api/v1/owner/bots/:bot_id), not the URLs.

export interface Metrics {
  registry: Registry;
  httpDuration: HttpDurationHistogram;
  checkoutDecisions: Counter<'outcome'>;
  deliveryAttempts: Counter<'result'>;
  webhookRoundTrips: Counter<'kind'>;
  /** The event loop's delay per second (started by the app, src/app.ts). */
  eventLoop: EventLoopMonitor;
  /** Requests answered `503 overloaded` at admission, by reason (platform/overload.ts). */
  requestsShed: Counter<'reason'>;
}

/**
 * The events not yet delivered nor acknowledged, less the acknowledgement (the caller's): pending
 * deliveries (their webhook_queue rows) and those failed for good (migration 0052; one bot's:
 * src/webhooks/messageQueue.ts). A delivery does not write its event.
 */
const UNDELIVERED_EVENT_IDS = `(SELECT q.event_id FROM webhook_queue q
  UNION ALL
  SELECT d.event_id FROM webhook_deliveries d WHERE d.failed_at IS NOT NULL AND d.status = 'failed')`;

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
    help: 'Webhook delivery attempts by result (delivered, failed_attempt, refused, waiting_for_tunnel: nothing sent, the bot never connected its tunnel client)',
    labelNames: ['result'] as const,
    registers: [registry],
  });
  const webhookRoundTrips = new Counter({
    name: 'botpay_webhook_worker_round_trips_total',
    help: 'Database round trips of the webhook delivery worker by kind (claim, record)',
    labelNames: ['kind'] as const,
    registers: [registry],
  });
  const requestsShed = new Counter({
    name: 'botpay_requests_shed_total',
    help: 'Requests answered 503 overloaded before any work, by reason (database_wait, event_loop_delay)',
    labelNames: ['reason'] as const,
    registers: [registry],
  });
  // The database sessions (platform/db/gate.ts): read from the driver when /metrics is scraped.
  const sessionGauge = (name: string, help: string, read: (load: ReturnType<Db['load']>) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(read(db.load()));
      },
    });
  sessionGauge(
    'botpay_db_pool_size',
    'Database sessions this instance may hold at once (PostgreSQL: DATABASE_POOL_SIZE connections; embedded: calls queued in its thread)',
    (l) => l.size,
  );
  sessionGauge('botpay_db_pool_in_use', 'Database sessions in use now', (l) => l.inUse);
  sessionGauge(
    'botpay_db_pool_waiting',
    'Statements and transactions waiting for a database session now',
    (l) => l.waiting,
  );
  new Counter({
    name: 'botpay_db_pool_refused_total',
    help: 'Statements refused (503 overloaded) because no database session came free within DATABASE_POOL_WAIT_MS',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(db.load().refused);
    },
  });
  registry.registerMetric(
    new CountsHistogram(
      'botpay_db_pool_wait_seconds',
      'Time each statement or transaction waited for a database session',
      WAIT_BUCKETS,
      () => {
        const l = db.load();
        return { counts: l.waitCounts, sum: l.waitSumSeconds };
      },
    ) as unknown as Metric,
  );
  new Counter({
    name: 'botpay_spend_batches_total',
    help: 'Transactions that ran several purchases at once (group commit: SPEND_BATCH_SIZE, SPEND_CONCURRENCY)',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(spendQueueLoad(db).batches);
    },
  });
  new Counter({
    name: 'botpay_spend_batched_purchases_total',
    help: 'Purchases run in those transactions (÷ botpay_spend_batches_total: the mean batch size)',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(spendQueueLoad(db).batched);
    },
  });
  new Gauge({
    name: 'botpay_spend_waiting',
    help: "Purchases waiting now for one of the instance's purchase calls (SPEND_CONCURRENCY)",
    registers: [registry],
    collect() {
      this.set(spendQueueLoad(db).waiting);
    },
  });
  const eventLoop = new EventLoopMonitor();
  registry.registerMetric(
    new CountsHistogram(
      'botpay_event_loop_delay_seconds',
      'Longest event-loop delay in each second (how late a timer due then ran)',
      EVENT_LOOP_BUCKETS,
      () => ({ counts: eventLoop.windowMaxCounts, sum: eventLoop.windowMaxSum }),
    ) as unknown as Metric,
  );
  new Gauge({
    name: 'botpay_event_loop_lag_seconds',
    help: 'Event-loop delay over the last second, a mean weighted by time (SHED_EVENT_LOOP_DELAY_MS is compared with two such seconds in a row)',
    registers: [registry],
    collect() {
      this.set(eventLoop.delayMs / 1000);
    },
  });
  new Gauge({
    name: 'botpay_events_undelivered',
    help: 'Events not yet delivered nor acknowledged (queue depth)',
    registers: [registry],
    async collect() {
      const v = await scalar(
        db,
        `SELECT count(*)::int AS v FROM events e WHERE e.id IN ${UNDELIVERED_EVENT_IDS} AND e.acked_at IS NULL`,
      );
      if (v !== undefined) this.set(v);
    },
  });
  new Gauge({
    name: 'botpay_events_oldest_undelivered_age_seconds',
    help: 'Age of the oldest event not yet delivered nor acknowledged',
    registers: [registry],
    async collect() {
      const v = await scalar(
        db,
        `SELECT coalesce(extract(epoch FROM now() - min(e.created_at)), 0)::float8 AS v
           FROM events e WHERE e.id IN ${UNDELIVERED_EVENT_IDS} AND e.acked_at IS NULL`,
      );
      if (v !== undefined) this.set(v);
    },
  });
  new Gauge({
    name: 'botpay_webhook_deliveries_held',
    help: 'Pending webhook deliveries held back because their bot is at its in-flight bound with a backlog (given back in event order as its slots free up)',
    registers: [registry],
    async collect() {
      // Read through webhook_queue_held_idx (migration 0058): only held rows are in it.
      const v = await scalar(
        db,
        'SELECT count(*)::int AS v FROM webhook_queue WHERE held_due_at IS NOT NULL',
      );
      if (v !== undefined) this.set(v);
    },
  });
  return {
    registry,
    httpDuration,
    checkoutDecisions,
    deliveryAttempts,
    webhookRoundTrips,
    eventLoop,
    requestsShed,
  };
}

/**
 * A histogram whose observations are counted elsewhere (per bucket, not cumulative, the last slot
 * above every bound) and formatted by the registry when /metrics is read.
 */
class CountsHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[],
    private readonly read: () => { counts: readonly number[]; sum: number },
  ) {}

  get() {
    const { counts, sum } = this.read();
    const values: MetricValueWithName<string>[] = [];
    let cumulative = 0;
    this.buckets.forEach((le, i) => {
      cumulative += counts[i] ?? 0;
      values.push({ labels: { le }, value: cumulative, metricName: `${this.name}_bucket` });
    });
    cumulative += counts[this.buckets.length] ?? 0;
    values.push({ labels: { le: '+Inf' }, value: cumulative, metricName: `${this.name}_bucket` });
    values.push({ labels: {}, value: sum, metricName: `${this.name}_sum` });
    values.push({ labels: {}, value: cumulative, metricName: `${this.name}_count` });
    return {
      name: this.name,
      help: this.help,
      type: 'histogram' as const,
      values,
      aggregator: 'sum' as const,
    };
  }

  reset(): void {}
}

/**
 * One number read from the database for a gauge, or undefined when the read failed — an instance
 * past its capacity refuses it (`overloaded`) like any other statement. The gauge then keeps the
 * value it had: a NaN would make every alert on it false exactly when the instance is busiest.
 */
async function scalar(db: Db, sql: string): Promise<number | undefined> {
  try {
    const rows = await db.query<{ v: number }>(sql);
    return Number(rows[0]?.v ?? 0);
  } catch {
    return undefined;
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
