import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

describe('smoke', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('registers, claims, funds and reports status', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 2500 });
    const res = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ status: 'active', rails: { card_wallet: { balance_usd: 25 } } });
  });
});
