import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Histogram, type Metric, Registry } from 'prom-client';
import { OverloadedError } from '../../src/platform/db/gate.ts';
import type { Db } from '../../src/platform/db/port.ts';
import { createMetrics, HTTP_BUCKETS, HttpDurationHistogram } from '../../src/platform/metrics.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

describe('/metrics', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('exposes request latency by route pattern (never by id) and queue depth', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 100 });
    await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    const res = await svc.app.inject({ url: '/metrics' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/plain/);
    const text = res.body;
    expect(text).toMatch(
      /botpay_http_request_duration_seconds_bucket\{[^}]*route="\/api\/v1\/bot\/status"[^}]*status="200"/,
    );
    expect(text).toMatch(/route="\/api\/v1\/owner\/bots\/:bot_id\/wallet\/fund"/);
    expect(text).not.toContain(bot.bot_id);
    // wallet.activated and wallet.funded are queued for this bot: the gauge counts them.
    expect(Number(/botpay_events_undelivered (\d+)/.exec(text)?.[1])).toBeGreaterThanOrEqual(2);
    expect(text).toMatch(/botpay_events_oldest_undelivered_age_seconds \d/);
    expect(text).toContain('botpay_checkout_decisions_total');
    expect(text).toContain('botpay_webhook_delivery_attempts_total');
  });

  it('keeps the queue gauges at their last value (never NaN) while the database refuses their reads as overloaded', async () => {
    let refuse = false;
    const db = new Proxy(svc.ctx.db, {
      get(target, key, receiver) {
        if (key === 'query') {
          return (...args: Parameters<Db['query']>) => {
            if (refuse) return Promise.reject(new OverloadedError('no session came free'));
            return target.query(...args);
          };
        }
        const value = Reflect.get(target, key, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const { registry } = createMetrics(db);
    const gauges = (text: string) =>
      text
        .split('\n')
        .filter((line) => /^botpay_events_(undelivered|oldest_undelivered_age_seconds) /.test(line));
    const before = gauges(await registry.metrics());
    expect(before).toHaveLength(2);
    expect(Number(before[0]!.split(' ')[1])).toBeGreaterThanOrEqual(2);
    refuse = true;
    const during = gauges(await registry.metrics());
    expect(during.join('\n')).not.toMatch(/nan/i);
    expect(during[0]).toBe(before[0]);
    expect(during).toHaveLength(2);
  });
});

describe('the request latency histogram', () => {
  it("writes the same Prometheus text as prom-client's Histogram fed the same observations", async () => {
    const name = 'botpay_http_request_duration_seconds';
    const help = 'HTTP request latency by route pattern, method and status code';
    const ours = new Registry();
    const fast = new HttpDurationHistogram(name, help, HTTP_BUCKETS);
    ours.registerMetric(fast as unknown as Metric);
    const reference = new Registry();
    const histogram = new Histogram({
      name,
      help,
      labelNames: ['method', 'route', 'status'] as const,
      buckets: HTTP_BUCKETS,
      registers: [reference],
    });
    const routes = ['/api/v1/bot/status', '/api/v1/owner/bots/:bot_id', 'unmatched'];
    let seed = 7;
    const next = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    // Values on the bucket bounds too (a bound counts in its own bucket: le is "≤").
    const values = [...HTTP_BUCKETS, 0, 20, ...Array.from({ length: 500 }, () => next() ** 3 * 12)];
    for (const [i, seconds] of values.entries()) {
      const method = i % 3 === 0 ? 'POST' : 'GET';
      const route = routes[i % routes.length] ?? 'unmatched';
      const status = [200, 401, 404, 429][i % 4] ?? 200;
      fast.observe(method, route, status, seconds);
      histogram.observe({ method, route, status: String(status) }, seconds);
    }
    const text = await ours.metrics();
    expect(text).toBe(await reference.metrics());
    expect(text).toContain(
      `${name}_bucket{le="0.001",method="POST",route="/api/v1/bot/status",status="200"}`,
    );
    ours.resetMetrics();
    histogram.reset();
    expect(await ours.metrics()).toBe(await reference.metrics());
  });
});
