import { verify as verifyGithubStyle } from '@octokit/webhooks-methods';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyStandardWebhook } from '../../packages/client/src/webhooks/verify.ts';
import { FakeClock } from '../../src/platform/clock.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { type Received, Receiver } from './helpers.ts';

// Real deliveries from the worker to a real receiver on loopback, checked by two independent
// verifiers: the reference `standardwebhooks` package (the Standard Webhooks scheme, what Svix's
// libraries implement) and @octokit/webhooks-methods (SPEC's X-Service-Signature, sha256=<hex>).
// The service's clock is the real time here: the reference verifier checks the timestamp against
// Date.now().

function headersOf(r: Received): Record<string, string> {
  return {
    'webhook-id': String(r.headers['webhook-id']),
    'webhook-timestamp': String(r.headers['webhook-timestamp']),
    'webhook-signature': String(r.headers['webhook-signature']),
  };
}

describe('Standard Webhooks signatures on real deliveries', () => {
  let svc: TestService;
  let receiver: Receiver;
  let worker: DeliveryWorker;
  const clock = new FakeClock(Date.now());

  beforeAll(async () => {
    svc = await createTestService({ clock, env: { WEBHOOK_SECRET_OVERLAP_SECONDS: '3600' } });
    receiver = await new Receiver().start();
    worker = new DeliveryWorker(svc.ctx);
  });
  afterAll(async () => {
    await worker.stop();
    await receiver.close();
    await svc.close();
  });

  async function fund(owner: Awaited<ReturnType<typeof createOwner>>, botId: string) {
    const res = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${botId}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 500 },
    });
    expect(res.statusCode).toBe(200);
  }

  it('the reference verifier accepts every delivery unchanged; a tampered or replayed one is refused', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: receiver.url('/std') } });
    await fund(owner, bot.bot_id);
    const before = receiver.requests.length;
    await worker.runOnce();
    const got = receiver.requests.slice(before).filter((r) => r.url === '/std');
    expect(got.length).toBe(2);
    const wh = new Webhook(bot.webhook_secret);
    for (const r of got) {
      const body = JSON.parse(r.body);
      // webhook-id is the event id: the same on every retry of one event, so receivers deduplicate.
      expect(r.headers['webhook-id']).toBe(body.id);
      expect(r.headers['webhook-timestamp']).toMatch(/^\d{10}$/);
      expect(r.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
      expect(wh.verify(r.body, headersOf(r))).toEqual(body);
      // SPEC's header is still there, exactly as before.
      expect(
        await verifyGithubStyle(bot.webhook_secret, r.body, String(r.headers['x-service-signature'])),
      ).toBe(true);
      // The SDK's own verifier agrees.
      expect(verifyStandardWebhook(r.body, headersOf(r), bot.webhook_secret)).toBeNull();
      // Tampering with the body or the id is caught.
      expect(() => wh.verify(r.body.replace('"data"', '"dato"'), headersOf(r))).toThrow(
        WebhookVerificationError,
      );
      expect(() => wh.verify(r.body, { ...headersOf(r), 'webhook-id': 'evt_other' })).toThrow(
        WebhookVerificationError,
      );
      // A delivery replayed ten minutes later fails the timestamp tolerance.
      const later = Date.now() + 10 * 60_000;
      expect(verifyStandardWebhook(r.body, headersOf(r), bot.webhook_secret, { now: () => later })).toBe(
        'timestamp_out_of_tolerance',
      );
    }
  });

  it('a rotation signs with both secrets during the overlap window, then only with the new one', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: receiver.url('/rotate') } });
    await worker.runOnce();
    const rotated = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/webhook-secret/rotate`,
      headers: owner.auth,
    });
    expect(rotated.statusCode).toBe(200);
    const { webhook_secret: newSecret, previous_secret_valid_until } = rotated.json();
    expect(newSecret).toMatch(/^whsec_[0-9a-f]{48}$/);
    expect(Date.parse(previous_secret_valid_until) - clock.now()).toBe(3_600_000);

    const during = receiver.requests.length;
    await fund(owner, bot.bot_id);
    await worker.runOnce();
    const [inOverlap] = receiver.requests.slice(during).filter((r) => r.url === '/rotate');
    expect(inOverlap).toBeDefined();
    expect(String(inOverlap!.headers['webhook-signature']).split(' ')).toHaveLength(2);
    // A receiver still holding the old secret and one already on the new secret both verify.
    expect(() =>
      new Webhook(bot.webhook_secret).verify(inOverlap!.body, headersOf(inOverlap!)),
    ).not.toThrow();
    expect(() => new Webhook(newSecret).verify(inOverlap!.body, headersOf(inOverlap!))).not.toThrow();
    expect(
      await verifyGithubStyle(newSecret, inOverlap!.body, String(inOverlap!.headers['x-service-signature'])),
    ).toBe(true);

    // After the window only the new secret signs. (The service's clock moves; the reference
    // verifier's tolerance is against the real clock, so the SDK verifier is given the same now.)
    clock.advance(3_600_000 + 1_000);
    const after = receiver.requests.length;
    await fund(owner, bot.bot_id);
    await worker.runOnce();
    const [late] = receiver.requests.slice(after).filter((r) => r.url === '/rotate');
    expect(late).toBeDefined();
    expect(String(late!.headers['webhook-signature']).split(' ')).toHaveLength(1);
    const now = () => clock.now();
    expect(verifyStandardWebhook(late!.body, headersOf(late!), newSecret, { now })).toBeNull();
    expect(verifyStandardWebhook(late!.body, headersOf(late!), bot.webhook_secret, { now })).toBe(
      'invalid_signature',
    );
  });
});
