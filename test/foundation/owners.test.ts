import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ledgerBalances } from '../../src/wallet/ledger.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  registerBot,
  type TestOwner,
  type TestService,
} from '../support/service.ts';

describe('owner API basics', () => {
  let svc: TestService;
  let owner: TestOwner;
  beforeAll(async () => {
    svc = await createTestService();
    owner = await createOwner(svc);
  });
  afterAll(async () => {
    await svc.close();
  });

  const events = async (botId: string) =>
    (
      await svc.ctx.db.query<{ type: string; body: string }>(
        'SELECT type, body FROM events WHERE bot_id = $1 ORDER BY seq',
        [botId],
      )
    ).map((e) => ({ type: e.type, body: JSON.parse(e.body) }));

  describe('claims', () => {
    it('claiming activates the wallet, emits wallet.activated, notifies the registration e-mail and is single use', async () => {
      const bot = await registerBot(svc, { owner_email: 'someone@example.com' });
      const auth = { authorization: `Bearer ${bot.api_key}` };
      expect(
        (await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: auth })).json().wallet_status,
      ).toBe('pending');
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/claims',
        headers: owner.auth,
        payload: { claim_token: bot.claim_token },
      });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ bot_id: bot.bot_id, status: 'active' });
      expect(
        (await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: auth })).json().wallet_status,
      ).toBe('active');
      const evs = await events(bot.bot_id);
      expect(evs.map((e) => e.type)).toEqual(['wallet.activated']);
      expect(evs[0]?.body).toMatchObject({
        event: 'wallet.activated',
        bot_id: bot.bot_id,
        data: { owner_uid: owner.id },
      });
      expect(evs[0]?.body.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(svc.mailer.sent.at(-1)).toMatchObject({
        to: 'someone@example.com',
        subject: expect.stringContaining('claimed'),
      });

      const other = await createOwner(svc);
      const again = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/claims',
        headers: other.auth,
        payload: { claim_token: bot.claim_token },
      });
      expect(again.statusCode).toBe(400);
      expect(again.json().error).toBe('invalid_claim_token');
      const detail = await svc.app.inject({ url: `/api/v1/owner/bots/${bot.bot_id}`, headers: other.auth });
      expect(detail.statusCode).toBe(404);
    });

    it('400 invalid_claim_token for unknown tokens, 400 validation_error without one', async () => {
      const unknown = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/claims',
        headers: owner.auth,
        payload: { claim_token: 'nope' },
      });
      expect(unknown.json().error).toBe('invalid_claim_token');
      const missing = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/claims',
        headers: owner.auth,
        payload: {},
      });
      expect(missing.statusCode).toBe(400);
      expect(missing.json().error).toBe('validation_error');
    });
  });

  describe('pairing codes', () => {
    it('6 digits, valid one hour, at most 5 per owner per hour', async () => {
      const o = await createOwner(svc);
      const codes: string[] = [];
      for (let i = 0; i < 5; i++) {
        const res = await svc.app.inject({
          method: 'POST',
          url: '/api/v1/owner/pairing-codes',
          headers: o.auth,
        });
        expect(res.statusCode).toBe(201);
        const body = res.json();
        expect(body.pairing_code).toMatch(/^\d{6}$/);
        expect(new Date(body.expires_at).getTime()).toBe(svc.clock.now() + 3600_000);
        codes.push(body.pairing_code);
      }
      expect(new Set(codes).size).toBe(5);
      const sixth = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/pairing-codes',
        headers: o.auth,
      });
      expect(sixth.statusCode).toBe(429);
      expect(sixth.json()).toMatchObject({ error: 'rate_limited', retry_after_seconds: 3600 });
      // Stored as keyed hashes only.
      const stored = await svc.ctx.db.query<{ code_hash: string }>(
        'SELECT code_hash FROM pairing_codes WHERE owner_id = $1',
        [o.id],
      );
      for (const row of stored) for (const code of codes) expect(row.code_hash).not.toContain(code);
    });
  });

  describe('funding', () => {
    it('credits the wallet through the ledger and emits wallet.funded', async () => {
      const bot = await activeBot(svc, owner);
      const res = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
        headers: owner.auth,
        payload: { amount_cents: 1234 },
      });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ amount_usd: 12.34, balance_usd: 12.34 });
      const status = (await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).json();
      expect(status.rails.card_wallet.balance_usd).toBe(12.34);
      const funded = (await events(bot.bot_id)).find((e) => e.type === 'wallet.funded');
      expect(funded?.body.data).toMatchObject({ amount: 12.34, balance: 12.34 });
      const balances = await ledgerBalances(svc.ctx.db, bot.bot_id);
      // The ledger counts micro-dollars: $12.34 is 12,340,000.
      expect(balances).toEqual({
        wallet_available: 12_340_000,
        wallet_held: 0,
        owner_funding: -12_340_000,
        merchant_settlement: 0,
        decoy_cover: 0,
        decoy_spent: 0,
        decoy_held: 0,
        x402_deposits: 0,
        x402_available: 0,
        x402_held: 0,
        x402_authorized: 0,
        x402_paid: 0,
      });
    });

    it.each([0, -5, 1_000_001, 12.5, '100', null])(
      'rejects amount_cents %s and changes nothing',
      async (amount) => {
        const bot = await activeBot(svc, owner, { fundCents: 100 });
        const res = await svc.app.inject({
          method: 'POST',
          url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
          headers: owner.auth,
          payload: { amount_cents: amount },
        });
        expect(res.statusCode).toBe(400);
        expect(res.json().error).toBe('validation_error');
        expect((await ledgerBalances(svc.ctx.db, bot.bot_id)).wallet_available).toBe(1_000_000); // $1
      },
    );

    it('404 for an unknown bot id, 400 for a malformed one', async () => {
      const unknown = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/bots/bot_aaaaaaaaaaaaaaaa/wallet/fund',
        headers: owner.auth,
        payload: { amount_cents: 1 },
      });
      expect(unknown.statusCode).toBe(404);
      const malformed = await svc.app.inject({
        method: 'POST',
        url: "/api/v1/owner/bots/'%20OR%201=1/wallet/fund",
        headers: owner.auth,
        payload: { amount_cents: 1 },
      });
      expect(malformed.statusCode).toBe(400);
    });
  });

  describe('bot status for every state', () => {
    it('pending → active → frozen → active → inactive → active', async () => {
      const bot = await registerBot(svc, { owner_email: owner.email });
      const auth = { authorization: `Bearer ${bot.api_key}` };
      const status = async () => (await svc.app.inject({ url: '/api/v1/bot/status', headers: auth })).json();

      const pending = await status();
      expect(pending).toEqual({
        bot_id: bot.bot_id,
        bot_name: expect.any(String),
        status: 'pending',
        default_rail: null,
        rails: {},
        master_guardrails: null,
        message: expect.any(String),
      });

      await svc.app.inject({
        method: 'POST',
        url: '/api/v1/owner/claims',
        headers: owner.auth,
        payload: { claim_token: bot.claim_token },
      });
      const active = await status();
      expect(active).toMatchObject({
        status: 'active',
        default_rail: 'card_wallet',
        active_rails: ['card_wallet'],
        rails: {
          card_wallet: {
            status: 'active',
            balance_usd: 0,
            spending_limits: {
              per_transaction_usd: 5,
              monthly_usd: 100,
              monthly_spent_usd: 0,
              monthly_remaining_usd: 100,
            },
          },
        },
        master_guardrails: { per_transaction_usd: 5, daily_budget_usd: 20, monthly_budget_usd: 100 },
        pending_messages: 1,
        webhook_status: 'active',
        webhook_fail_count: 0,
      });

      const freeze = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
        headers: owner.auth,
      });
      expect(freeze.json()).toEqual({ bot_id: bot.bot_id, wallet_status: 'frozen' });
      expect((await status()).status).toBe('frozen');
      // Freezing twice is harmless and emits nothing new.
      await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
        headers: owner.auth,
      });
      await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/unfreeze`,
        headers: owner.auth,
      });
      expect((await status()).status).toBe('active');
      expect((await events(bot.bot_id)).map((e) => e.type)).toEqual([
        'wallet.activated',
        'wallet.frozen',
        'wallet.unfrozen',
      ]);

      const off = await svc.app.inject({
        method: 'PUT',
        url: `/api/v1/owner/bots/${bot.bot_id}/rails/card_wallet`,
        headers: owner.auth,
        payload: { status: 'inactive' },
      });
      expect(off.statusCode).toBe(200);
      const inactive = await status();
      expect(inactive).toMatchObject({ status: 'inactive', default_rail: null, active_rails: [] });
      expect((await events(bot.bot_id)).at(-1)?.type).toBe('rails.updated');

      // The partner wallet needs X402_NETWORK (test/x402/ turns it on with a configured chain).
      const partner = await svc.app.inject({
        method: 'PUT',
        url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
        headers: owner.auth,
        payload: { status: 'active' },
      });
      expect(partner.statusCode).toBe(409);
      expect(partner.json()).toMatchObject({ error: 'rail_not_configured' });
      expect(await status()).toMatchObject({ status: 'inactive', active_rails: [] });
    });

    it('partner_wallet takes no typed address; unknown rails are 400', async () => {
      const bot = await activeBot(svc, owner);
      const typed = await svc.app.inject({
        method: 'PUT',
        url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
        headers: owner.auth,
        payload: { status: 'active', address: '0xabc123' },
      });
      expect(typed.statusCode).toBe(400);
      const unknown = await svc.app.inject({
        method: 'PUT',
        url: `/api/v1/owner/bots/${bot.bot_id}/rails/bitcoin`,
        headers: owner.auth,
        payload: { status: 'active' },
      });
      expect(unknown.statusCode).toBe(400);
    });

    it('wallet check reports balance, limits and card status', async () => {
      const bot = await activeBot(svc, owner, { fundCents: 5000 });
      const res = await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({
        wallet_status: 'active',
        balance_usd: 50,
        card_status: 'none',
        spending_limits: {
          per_transaction_usd: 5,
          monthly_usd: 100,
          monthly_spent_usd: 0,
          monthly_remaining_usd: 100,
        },
        pending_topups: 0,
      });
    });
  });

  describe('master guardrails', () => {
    it('defaults $5 / $20 / $100; updates partially; shows in bot status', async () => {
      const o = await createOwner(svc);
      const get = await svc.app.inject({ url: '/api/v1/owner/guardrails', headers: o.auth });
      expect(get.json()).toMatchObject({
        per_transaction_usd: 5,
        daily_budget_usd: 20,
        monthly_budget_usd: 100,
      });
      const put = await svc.app.inject({
        method: 'PUT',
        url: '/api/v1/owner/guardrails',
        headers: o.auth,
        payload: { daily_budget_cents: 3000 },
      });
      expect(put.statusCode).toBe(200);
      expect(put.json()).toMatchObject({
        per_transaction_usd: 5,
        daily_budget_usd: 30,
        monthly_budget_usd: 100,
      });
      const bot = await activeBot(svc, o);
      const status = (await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).json();
      expect(status.master_guardrails.daily_budget_usd).toBe(30);
    });

    it.each([{}, { per_transaction_cents: -1 }, { daily_budget_cents: '10' }, { monthly_budget_cents: 1.5 }])(
      'rejects %j',
      async (payload) => {
        const res = await svc.app.inject({
          method: 'PUT',
          url: '/api/v1/owner/guardrails',
          headers: owner.auth,
          payload,
        });
        expect(res.statusCode).toBe(400);
        expect(res.json().error).toBe('validation_error');
      },
    );
  });

  describe('bots, transactions and audit log', () => {
    it('lists only the owner’s bots, with wallet and webhook health', async () => {
      const o = await createOwner(svc);
      const a = await activeBot(svc, o, { fundCents: 700 });
      await activeBot(svc, owner);
      const list = (await svc.app.inject({ url: '/api/v1/owner/bots', headers: o.auth })).json();
      expect(list.bots).toHaveLength(1);
      expect(list.bots[0]).toMatchObject({
        bot_id: a.bot_id,
        status: 'active',
        wallet: { status: 'active', balance_usd: 7, held_usd: 0 },
        webhook: { target: 'callback_url', status: 'active', fail_count: 0 },
        pending_approvals: 0,
      });
      const detail = (
        await svc.app.inject({ url: `/api/v1/owner/bots/${a.bot_id}`, headers: o.auth })
      ).json();
      expect(detail).toMatchObject({
        bot_id: a.bot_id,
        rails: [{ rail: 'card_wallet', status: 'active' }],
        cards: [],
      });

      const txs = (
        await svc.app.inject({ url: `/api/v1/owner/bots/${a.bot_id}/transactions`, headers: o.auth })
      ).json();
      expect(txs.transactions).toEqual([
        expect.objectContaining({ kind: 'funding', available_change_usd: 7, held_change_usd: 0 }),
      ]);
      const audit = (
        await svc.app.inject({ url: `/api/v1/owner/bots/${a.bot_id}/audit-log`, headers: o.auth })
      ).json();
      expect(audit.entries.map((e: { action: string }) => e.action)).toEqual([
        'wallet.funded',
        'bot.claimed',
      ]);
    });

    it('rotating the webhook secret returns the new value once and stores it encrypted', async () => {
      const bot = await activeBot(svc, owner);
      const res = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/webhook-secret/rotate`,
        headers: owner.auth,
      });
      const secret = res.json().webhook_secret as string;
      expect(secret).toMatch(/^whsec_[0-9a-f]{48}$/);
      expect(secret).not.toBe(bot.webhook_secret);
      const row = (
        await svc.ctx.db.query<{ webhook_secret_enc: string }>(
          'SELECT webhook_secret_enc FROM bots WHERE id = $1',
          [bot.bot_id],
        )
      )[0]!;
      expect(row.webhook_secret_enc).not.toContain(secret);
      expect(svc.ctx.secrets.decrypt(row.webhook_secret_enc)).toBe(secret);
    });
  });
});
