import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getCard } from '../../src/cards/service.ts';
import { listAudit } from '../../src/owners/audit.ts';
import { getBot, listBots } from '../../src/owners/bots.ts';
import { listTransactions } from '../../src/owners/funding.ts';
import { getMasterGuardrails } from '../../src/owners/guardrails.ts';
import { listOwnerTopups } from '../../src/topups/service.ts';
import { getX402Wallet, listX402Payments } from '../../src/x402/owner.ts';
import { creditDeposit, enableWallet, PAY_TO, payRequest, requirement, X402_ENV } from '../x402/helpers.ts';
import { setupCard } from '../checkout/helpers.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

// Response schemas are exact (no open objects): a field the service returns but the schema lacks
// would be dropped by the serializer. Each answer here is compared with the service's own result.

let svc: TestService;
let owner: Awaited<ReturnType<typeof createOwner>>;
let bot: Awaited<ReturnType<typeof activeBot>>;
let card: Awaited<ReturnType<typeof setupCard>>;

beforeAll(async () => {
  svc = await createTestService();
  owner = await createOwner(svc);
  bot = await activeBot(svc, owner, { fundCents: 5000 });
  card = await setupCard(svc, owner, bot.bot_id);
  await svc.app.inject({
    method: 'PUT',
    url: '/api/v1/owner/guardrails',
    headers: owner.auth,
    payload: { daily_budget_cents: 10_000 },
  });
});
afterAll(async () => {
  await svc.close();
});

const plain = (value: unknown) => JSON.parse(JSON.stringify(value));

async function get(url: string) {
  const res = await svc.app.inject({ url, headers: owner.auth });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
}

describe('owner API answers are exactly what the services return', () => {
  it('bots, one bot, transactions, audit log, master guardrails', async () => {
    const id = bot.bot_id;
    expect(await get('/api/v1/owner/bots')).toEqual(plain(await listBots(svc.ctx, owner.id)));
    const detail = await get(`/api/v1/owner/bots/${id}`);
    expect(detail.cards).toHaveLength(1);
    expect(detail).toEqual(plain(await getBot(svc.ctx, owner.id, id)));
    const transactions = await get(`/api/v1/owner/bots/${id}/transactions`);
    expect(transactions.transactions.length).toBeGreaterThan(0);
    expect(transactions).toEqual(plain(await listTransactions(svc.ctx, owner.id, id, 50)));
    const auditLog = await get(`/api/v1/owner/bots/${id}/audit-log`);
    expect(auditLog.entries.length).toBeGreaterThan(2);
    expect(auditLog).toEqual(plain(await listAudit(svc.ctx, owner.id, id, 50)));
    expect(await get('/api/v1/owner/guardrails')).toEqual(
      plain(await getMasterGuardrails(svc.ctx.db, owner.id, svc.clock.now())),
    );
  });
});

describe('card answers are exactly what the services return', () => {
  it('one card', async () => {
    const url = `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}`;
    const answer = await get(url);
    expect(answer.profiles).toHaveLength(6);
    expect(answer).toEqual(plain(await getCard(svc.ctx, owner.id, bot.bot_id, card.card_id)));
  });
});

describe('top-up answers are exactly what the services return', () => {
  it('the owner list, an approval and a decline', async () => {
    const ask = async (amount_cents: number) => {
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/wallet/topup-requests',
        headers: bot.auth,
        payload: { amount_cents, reason: 'exact answers' },
      });
      expect(res.statusCode, res.body).toBe(201);
      return res.json().topup_id as string;
    };
    const first = await ask(1000);
    const second = await ask(2000);
    const list = await get('/api/v1/owner/topup-requests');
    expect(list.topup_requests).toHaveLength(2);
    expect(list).toEqual(plain(await listOwnerTopups(svc.ctx, owner.id)));
    const decide = async (id: string, action: string) => {
      const res = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/topup-requests/${id}/${action}`,
        headers: owner.auth,
        payload: {},
      });
      expect(res.statusCode, res.body).toBe(200);
      return res.json();
    };
    expect(Object.keys(await decide(first, 'approve')).sort()).toEqual(
      [
        'topup_id',
        'bot_id',
        'status',
        'amount_usd',
        'approved_amount_usd',
        'funding_id',
        'balance_usd',
        'bot_visible_balance_usd',
        'decided_at',
      ].sort(),
    );
    expect(await decide(second, 'decline')).toEqual({
      topup_id: second,
      bot_id: bot.bot_id,
      status: 'declined',
      amount_usd: 20,
      note: null,
      decided_at: expect.any(String),
    });
    const all = await get('/api/v1/owner/topup-requests?status=all');
    expect(all).toEqual(plain(await listOwnerTopups(svc.ctx, owner.id, { status: 'all' })));
  });
});

describe('partner wallet answers are exactly what the services return', () => {
  let x: TestService;
  afterAll(async () => {
    await x?.close();
  });

  it('the wallet and its payments', async () => {
    x = await createTestService({ env: X402_ENV });
    const o = await createOwner(x);
    const b = await activeBot(x, o);
    // A pay-to list (a domain list would make the service request the resource: test/x402/fetchThrough.test.ts).
    await enableWallet(x, o, b.bot_id, { approval_threshold_cents: 100, allow_pay_to: [PAY_TO] });
    await creditDeposit(x, b.bot_id, 1000);
    const paid = await payRequest(x, b, {
      resource_url: 'https://api.example.com/report',
      payment_requirements: [requirement({ amount: '50000' })],
    });
    expect(paid.statusCode, paid.body).toBe(200);
    const ask = async (url: string) => {
      const res = await x.app.inject({ url, headers: o.auth });
      expect(res.statusCode, res.body).toBe(200);
      return res.json();
    };
    expect(await ask(`/api/v1/owner/bots/${b.bot_id}/x402`)).toEqual(
      plain(await getX402Wallet(x.ctx, o.id, b.bot_id)),
    );
    const payments = await ask(`/api/v1/owner/bots/${b.bot_id}/x402/payments`);
    expect(payments.payments).toHaveLength(1);
    expect(payments).toEqual(plain(await listX402Payments(x.ctx, o.id, b.bot_id)));
  });
});
