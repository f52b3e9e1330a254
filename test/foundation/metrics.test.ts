import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
});
