import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../../../test/support/service.ts';
import { BotPayClient } from '../src/client.ts';
import { BotPayError } from '../src/errors.ts';

// The SDK against the real service (this repository's app, on the database leg under test),
// listening on 127.0.0.1 and reached over real HTTP with the global fetch.

async function listening(env: Record<string, string> = {}) {
  const svc = await createTestService({ env: { REGISTRATION_RATE_LIMIT_PER_HOUR: '1000', ...env } });
  const baseUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
  return { svc, baseUrl };
}

async function claim(svc: TestService, owner: TestOwner, claimToken: string | null) {
  const res = await svc.app.inject({
    method: 'POST',
    url: '/api/v1/owner/claims',
    headers: owner.auth,
    payload: { claim_token: claimToken },
  });
  expect(res.statusCode).toBe(200);
}

async function fund(svc: TestService, owner: TestOwner, botId: string, cents: number) {
  const res = await svc.app.inject({
    method: 'POST',
    url: `/api/v1/owner/bots/${botId}/wallet/fund`,
    headers: owner.auth,
    payload: { amount_cents: cents },
  });
  expect(res.statusCode).toBe(200);
}

const unique = () => `sdk-bot-${Math.random().toString(36).slice(2, 10)}`;

describe('client against the real service', () => {
  let svc: TestService;
  let baseUrl: string;
  let client: BotPayClient;
  beforeAll(async () => {
    ({ svc, baseUrl } = await listening());
    client = new BotPayClient({ baseUrl });
  });
  afterAll(async () => {
    await svc?.close();
  });

  it('registers, is pending until claimed, then active with the funded balance', async () => {
    const owner = await createOwner(svc);
    const reg = await client.register({
      bot_name: unique(),
      owner_email: owner.email,
      callback_url: 'http://127.0.0.1:9/hook',
    });
    expect(reg).toMatchObject({ status: 'pending_owner_verification' });
    expect(reg.api_key).toMatch(/^svc_live_[0-9a-f]{48}$/);
    expect(reg.webhook_secret).toMatch(/^whsec_/);
    expect(reg.owner_verification_url).toBe(`http://localhost:8080/claim?token=${reg.claim_token}`);

    const bot = client.withApiKey(reg.api_key);
    const pending = await bot.status();
    expect(pending).toMatchObject({
      bot_id: reg.bot_id,
      status: 'pending',
      rails: {},
      master_guardrails: null,
    });
    expect(pending.message).toContain('claim');
    expect(await bot.walletCheck()).toMatchObject({ wallet_status: 'pending', balance_usd: 0 });

    await claim(svc, owner, reg.claim_token);
    await fund(svc, owner, reg.bot_id, 2500);
    const active = await bot.status();
    expect(active).toMatchObject({
      status: 'active',
      default_rail: 'card_wallet',
      rails: { card_wallet: { status: 'active', balance_usd: 25 } },
    });
    expect(await bot.walletCheck()).toMatchObject({ wallet_status: 'active', balance_usd: 25 });
  });

  it('provisions a managed tunnel when no callback_url is given', async () => {
    const reg = await client.register({
      bot_name: unique(),
      owner_email: 'tunnel@example.com',
      bot_type: 'worker',
    });
    expect(reg.tunnel_token).toMatch(/^svc_tun_/);
    expect(reg.tunnel_setup).toMatchObject({ local_port: 8080, webhook_path: '/webhook' });
    expect(reg.webhook_url).toMatch(/^http:\/\/bot-[a-z2-7]+\.tunnel\.localhost:8080\/webhook$/);
  });

  it('reports validation errors with the code and the field', async () => {
    const error = (await client
      .register({ bot_name: unique(), owner_email: 'not-an-email' })
      .catch((e) => e)) as BotPayError;
    expect(error).toBeInstanceOf(BotPayError);
    expect(error).toMatchObject({ status: 400, code: 'validation_error', field: 'owner_email' });
    expect(error.requestId).toBeTruthy();

    const typed = (await client
      // Wrong type on purpose: the service must refuse it, not coerce it.
      .register({ bot_name: unique(), owner_email: 'a@example.com', local_port: '80' as unknown as number })
      .catch((e) => e)) as BotPayError;
    expect(typed).toMatchObject({ status: 400, code: 'validation_error' });
  });

  it('reports duplicate_registration as 409', async () => {
    const body = { bot_name: unique(), owner_email: 'dup@example.com', callback_url: 'http://127.0.0.1:9/h' };
    await client.register(body);
    await expect(client.register(body)).rejects.toMatchObject({
      status: 409,
      code: 'duplicate_registration',
    });
  });

  it('reports a wrong or revoked key as an authentication error, without retrying', async () => {
    let calls = 0;
    const counting = new BotPayClient({
      baseUrl,
      apiKey: `svc_live_${'0'.repeat(48)}`,
      fetch: (input, init) => {
        calls++;
        return fetch(input, init);
      },
    });
    const error = (await counting.status().catch((e) => e)) as BotPayError;
    expect(error).toMatchObject({ status: 401, code: 'Authentication required', isAuthentication: true });
    expect(calls).toBe(1);
    await expect(client.status()).rejects.toThrow(/API key/);
  });

  it('answers 404 for an endpoint the service does not have, as a typed error', async () => {
    const reg = await client.register({
      bot_name: unique(),
      owner_email: 'x@example.com',
      callback_url: 'http://127.0.0.1:9/h',
    });
    const res = await fetch(`${baseUrl}/api/v1/bot/nothing-here`, {
      headers: { authorization: `Bearer ${reg.api_key}` },
    });
    expect(res.status).toBe(404);
  });
});

describe('top-up requests through the client', () => {
  it('asks the owner for funds, sees the request, then the approval and the funded balance', async () => {
    const { svc, baseUrl } = await listening({ TOPUP_REQUESTS_OPEN_MAX: '1' });
    try {
      const owner = await createOwner(svc);
      const reg = await new BotPayClient({ baseUrl }).register({
        bot_name: unique(),
        owner_email: owner.email,
        callback_url: 'http://127.0.0.1:9/hook',
      });
      const bot = new BotPayClient({ baseUrl, apiKey: reg.api_key, retry: { maxAttempts: 1 } });
      const refused = await bot.requestTopup({ amount_cents: 500, reason: 'hello' }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(BotPayError);
      expect((refused as BotPayError).code).toBe('wallet_not_active');
      await claim(svc, owner, reg.claim_token);

      const asked = await bot.requestTopup({ amount_cents: 1500, reason: 'API credits' });
      expect(asked).toMatchObject({ status: 'pending', amount_usd: 15, reason: 'API credits' });
      expect((await bot.walletCheck()).pending_topups).toBe(1);
      const tooMany = await bot
        .requestTopup({ amount_cents: 100, reason: 'another' })
        .catch((e: unknown) => e);
      expect((tooMany as BotPayError).status).toBe(429);
      expect((tooMany as BotPayError).retryAfterSeconds).toBeGreaterThan(0);

      const approve = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/topup-requests/${asked.topup_id}/approve`,
        headers: owner.auth,
      });
      expect(approve.statusCode).toBe(200);
      const list = await bot.topupRequests();
      expect(list.topup_requests[0]).toMatchObject({
        topup_id: asked.topup_id,
        status: 'approved',
        approved_amount_usd: 15,
      });
      expect((await bot.walletCheck()).balance_usd).toBe(15);
      const events = (await bot.messages()).messages.map((m) => m.event);
      expect(events).toEqual(
        expect.arrayContaining(['wallet.topup_requested', 'wallet.funded', 'wallet.topup_approved']),
      );
    } finally {
      await svc.close();
    }
  });
});

describe('registration rate limit through the client', () => {
  let svc: TestService;
  let baseUrl: string;
  beforeAll(async () => {
    ({ svc, baseUrl } = await listening({ REGISTRATION_RATE_LIMIT_PER_HOUR: '1' }));
  });
  afterAll(async () => {
    await svc?.close();
  });

  it('hands back the 429 with retry_after_seconds, or waits it out when allowed to', async () => {
    const client = new BotPayClient({ baseUrl });
    await client.register({
      bot_name: unique(),
      owner_email: 'rl@example.com',
      callback_url: 'http://127.0.0.1:9/h',
    });
    const error = (await client
      .register({ bot_name: unique(), owner_email: 'rl@example.com', callback_url: 'http://127.0.0.1:9/h' })
      .catch((e) => e)) as BotPayError;
    expect(error).toMatchObject({ status: 429, code: 'rate_limited' });
    expect(error.retryAfterSeconds).toBeGreaterThan(3500);
    expect(error.retryAfterSeconds).toBeLessThanOrEqual(3600);

    // A caller willing to wait an hour: the injected sleep moves the service's fake clock instead.
    const waits: number[] = [];
    const patient = new BotPayClient({
      baseUrl,
      retry: { maxRetryAfterSeconds: 3600 },
      sleep: async (ms) => {
        waits.push(ms);
        svc.clock.advance(ms);
      },
    });
    const reg = await patient.register({
      bot_name: unique(),
      owner_email: 'rl@example.com',
      callback_url: 'http://127.0.0.1:9/h',
    });
    expect(reg.status).toBe('pending_owner_verification');
    expect(waits).toHaveLength(1);
    expect(waits[0]).toBeGreaterThanOrEqual(error.retryAfterSeconds! * 1000);
  });
});
