import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { checkout, events, expectLedgerConsistent, purchase, setupCard, wallet } from './helpers.ts';

// The decoy reserve in fundings (src/owners/funding.ts returnableReserve, docs/security.md): a
// funding gives back what every guess of the real profile agrees was decoy spending — the
// profiles' spending less the most any one profile spent, less what came back before — and holds
// back the gap between the top-spending profile and the real one.

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
});
afterAll(async () => {
  await svc.close();
});

describe('decoy reserve returned with a funding', () => {
  it('returns what no guess of the real profile disputes, and the rest as the real profile catches up', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 10_000 });
    const card = await setupCard(svc, owner, bot.bot_id, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 1000,
    });
    const real = card.real_profile_index;
    const [d1, d2] = [1, 2, 3, 4, 5, 6].filter((i) => i !== real) as [number, number];
    const fund = async (cents: number) => {
      const res = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
        headers: owner.auth,
        payload: { amount_cents: cents },
      });
      expect(res.statusCode, res.body).toBe(200);
      const funded = (await events(svc, bot.bot_id, 'wallet.funded')).find(
        (e) => e.data.funding_id === res.json().funding_id,
      )?.data.amount;
      return { owner: res.json(), botSees: Math.round(Number(funded) * 100) };
    };
    const buy = async (profile: number, cents: number) =>
      expect((await checkout(svc, bot, purchase(profile, cents))).statusCode).toBe(200);
    await buy(real, 200);
    await buy(d1, 300);
    await buy(d2, 100);
    // Reserve $4 (decoys); the busiest profile spent $3, the real one $2: $1 stays back.
    const detail = (
      await svc.app.inject({ url: `/api/v1/owner/bots/${bot.bot_id}`, headers: owner.auth })
    ).json();
    expect(detail.wallet).toMatchObject({ decoy_reserve_usd: 4, decoy_reserve_returnable_usd: 3 });
    let f = await fund(1000);
    expect(f.botSees).toBe(1300);
    expect(f.owner).toMatchObject({ amount_usd: 10, decoy_reserve_returned_usd: 3 });
    expect((await wallet(svc, bot.bot_id)).decoy_spent_micros).toBe(100 * 10_000);
    // Nothing more is undisputed until the real profile spends as much as the busiest one.
    f = await fund(1000);
    expect(f.botSees).toBe(1000);
    await buy(real, 100);
    // The real profile has now spent as much as the busiest one: all of the reserve comes back.
    f = await fund(1000);
    expect(f.botSees).toBe(1100);
    expect((await wallet(svc, bot.bot_id)).decoy_spent_micros).toBe(0);
    await expectLedgerConsistent(svc, bot.bot_id);
  });

  it('a top-up the bot asked for returns none of it (the bot knows the amount it asked for)', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 10_000 });
    const card = await setupCard(svc, owner, bot.bot_id, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 1000,
    });
    const decoy = card.real_profile_index === 1 ? 2 : 1;
    expect((await checkout(svc, bot, purchase(decoy, 300))).statusCode).toBe(200);
    const ask = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bot/wallet/topup-requests',
      headers: bot.auth,
      payload: { amount_cents: 2000, reason: 'books' },
    });
    expect(ask.statusCode, ask.body).toBe(201);
    const approve = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/topup-requests/${ask.json().topup_id}/approve`,
      headers: owner.auth,
    });
    expect(approve.statusCode, approve.body).toBe(200);
    const funded = (await events(svc, bot.bot_id, 'wallet.funded')).map((e) => e.data.amount);
    expect(funded.sort()).toEqual([100, 20].sort());
  });
});
