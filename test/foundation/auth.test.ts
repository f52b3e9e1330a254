import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';

// One shared set of authentication checks applied to every bot and owner route. The route list
// comes from the OpenAPI document, so a new route without an entry here fails the first test.

interface Sample {
  /** A body that passes validation (so a 404 proves isolation, not a schema failure). */
  body?: Record<string, unknown>;
  query?: string;
}

const SAMPLES: Record<string, Sample> = {
  'GET /api/v1/bot/status': {},
  'GET /api/v1/bot/wallet/check': {},
  'POST /api/v1/owner/claims': { body: { claim_token: 'svc_claim_unknown' } },
  'POST /api/v1/owner/pairing-codes': {},
  'GET /api/v1/owner/bots': {},
  'GET /api/v1/owner/bots/{bot_id}': {},
  'POST /api/v1/owner/bots/{bot_id}/wallet/fund': { body: { amount_cents: 100 } },
  'POST /api/v1/owner/bots/{bot_id}/wallet/freeze': {},
  'POST /api/v1/owner/bots/{bot_id}/wallet/unfreeze': {},
  'PUT /api/v1/owner/bots/{bot_id}/rails/{rail_key}': { body: { status: 'inactive' } },
  'GET /api/v1/owner/guardrails': {},
  'GET /api/v1/owner/tokens': {},
  'POST /api/v1/owner/tokens': { body: { name: 'sample' } },
  'DELETE /api/v1/owner/tokens/{token_id}': {},
  'PUT /api/v1/owner/guardrails': { body: { per_transaction_cents: 500 } },
  'GET /api/v1/owner/bots/{bot_id}/transactions': {},
  'GET /api/v1/owner/bots/{bot_id}/audit-log': {},
  'POST /api/v1/owner/bots/{bot_id}/api-key/rotate': {},
  'POST /api/v1/owner/bots/{bot_id}/webhook-secret/rotate': {},
  'POST /api/v1/owner/bots/{bot_id}/tunnel-token/rotate': {},
  'GET /api/v1/owner/bots/{bot_id}/tunnel': {},
  'PATCH /api/v1/owner/bots/{bot_id}/tunnel': { body: { forward: 'all' } },
  'POST /api/v1/bot/x402/pay': {
    body: {
      resource_url: 'https://api.example.com/data',
      payment_requirements: [
        {
          scheme: 'exact',
          network: 'eip155:8453',
          asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
          amount: '10000',
          payTo: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
          maxTimeoutSeconds: 60,
          extra: { name: 'USD Coin', version: '2' },
        },
      ],
    },
  },
  'GET /api/v1/bot/x402/payments/{payment_id}': {},
  'POST /api/v1/bot/x402/fetch': { body: { url: 'https://api.example.com/data' } },
  'POST /api/v1/bot/x402/payments/{payment_id}/refusal': { body: { reason: 'invalid signature' } },
  'GET /api/v1/owner/bots/{bot_id}/x402': {},
  'PATCH /api/v1/owner/bots/{bot_id}/x402': { body: { daily_cents: 100 } },
  'GET /api/v1/owner/bots/{bot_id}/x402/payments': {},
  'POST /api/v1/bot/merchant/checkout': {
    body: {
      profile_index: 1,
      merchant_name: 'Shop',
      merchant_url: 'https://shop.example.com',
      item_name: 'Pen',
      amount_cents: 100,
    },
  },
  'GET /api/v1/bot/merchant/checkout/status': { query: 'confirmation_id=chk_aaaaaaaaaaaaaaaa' },
  'GET /api/v1/owner/approvals': {},
  'POST /api/v1/owner/approvals/{confirmation_id}/approve': {},
  'POST /api/v1/owner/approvals/{confirmation_id}/deny': {},
  'POST /api/v1/owner/bots/{bot_id}/cards': { body: {} },
  'GET /api/v1/owner/bots/{bot_id}/cards/{card_id}': {},
  'PATCH /api/v1/owner/bots/{bot_id}/cards/{card_id}': { body: { per_transaction_cents: 100 } },
  'POST /api/v1/owner/bots/{bot_id}/cards/{card_id}/activate': {
    body: {
      bin: '453201',
      card_length: 16,
      expiry_month: '12',
      expiry_year: '2030',
      profiles: [1, 2, 3, 4, 5, 6].map((i) => ({ profile_index: i, missing_digits: '123', visible_luhn: 0 })),
    },
  },
  'GET /api/v1/owner/bots/{bot_id}/cards/{card_id}/profiles-file': {},
  'POST /api/v1/owner/bots/{bot_id}/cards/{card_id}/same-card': {
    body: { same_card_as: 'card_aaaaaaaaaaaaaaaa' },
  },
  'POST /api/v1/bot/tasks/next': {},
  'POST /api/v1/owner/bots/{bot_id}/schedules': {
    body: {
      cron: '0 * * * *',
      timezone: 'UTC',
      instructions: {
        profile_index: 1,
        merchant_name: 'Shop',
        merchant_url: 'https://shop.example.com/item',
        item_name: 'Item',
        amount_cents: 100,
      },
    },
  },
  'GET /api/v1/owner/bots/{bot_id}/schedules': {},
  'GET /api/v1/owner/bots/{bot_id}/tasks': {},
  'POST /api/v1/owner/bots/{bot_id}/schedules/{schedule_id}/pause': {},
  'POST /api/v1/owner/bots/{bot_id}/schedules/{schedule_id}/resume': {},
  'DELETE /api/v1/owner/bots/{bot_id}/schedules/{schedule_id}': {},
  'PUT /api/v1/owner/bots/{bot_id}/cards/{card_id}/profiles/{profile_index}': {
    body: { allowance_cents: 100, allowance_window: 'week' },
  },
  'GET /api/v1/bot/messages': {},
  'POST /api/v1/bot/messages/ack': { body: { event_ids: ['evt_aaaaaaaaaaaaaaaa'] } },
  'GET /api/v1/owner/bots/{bot_id}/webhook-deliveries': {},
  'POST /api/v1/owner/webhook-deliveries/{delivery_id}/retry': {},
  'GET /api/v1/owner/webhook-deliveries/{delivery_id}': {},
  'POST /api/v1/bot/wallet/topup-requests': { body: { amount_cents: 100, reason: 'test' } },
  'GET /api/v1/bot/wallet/topup-requests': {},
  'GET /api/v1/owner/topup-requests': {},
  'POST /api/v1/owner/topup-requests/{topup_id}/approve': {},
  'POST /api/v1/owner/topup-requests/{topup_id}/decline': {},
};

const PARAM_FALLBACK: Record<string, string> = {
  rail_key: 'card_wallet',
  delivery_id: 'whd_aaaaaaaaaaaaaaaa',
  profile_index: '1',
  confirmation_id: 'chk_aaaaaaaaaaaaaaaa',
  token_id: 'otk_aaaaaaaaaaaaaaaa',
};

function protectedRoutes(svc: TestService): string[] {
  const doc = svc.app.swagger() as { paths: Record<string, Record<string, unknown>> };
  const routes: string[] = [];
  for (const [path, ops] of Object.entries(doc.paths)) {
    if (!path.startsWith('/api/v1/bot/') && !path.startsWith('/api/v1/owner/')) continue;
    for (const method of Object.keys(ops)) routes.push(`${method.toUpperCase()} ${path}`);
  }
  return routes.sort();
}

function fill(path: string, botId: string): string {
  return path.replace(/\{(\w+)\}/g, (_m, name: string) => {
    if (name === 'bot_id') return botId;
    return PARAM_FALLBACK[name] ?? `${name.replace(/_id$/, '')}_aaaaaaaaaaaaaaaa`;
  });
}

describe('authentication on every protected route', () => {
  let svc: TestService;
  let owner: TestOwner;
  let other: TestOwner;
  let bot: Awaited<ReturnType<typeof activeBot>>;
  let foreignBot: Awaited<ReturnType<typeof activeBot>>;

  beforeAll(async () => {
    svc = await createTestService();
    owner = await createOwner(svc);
    other = await createOwner(svc);
    bot = await activeBot(svc, owner, { fundCents: 1000 });
    foreignBot = await activeBot(svc, other, { fundCents: 1000 });
  });
  afterAll(async () => {
    await svc.close();
  });

  it('every documented bot and owner route has a sample here', () => {
    const routes = protectedRoutes(svc);
    expect(routes.length).toBeGreaterThan(5);
    expect(routes.filter((r) => !(r in SAMPLES))).toEqual([]);
  });

  const badHeaders: Array<[string, Record<string, string>]> = [
    ['no header', {}],
    ['empty bearer', { authorization: 'Bearer ' }],
    ['basic scheme', { authorization: 'Basic dXNlcjpwYXNz' }],
    ['malformed bot key', { authorization: 'Bearer svc_live_XYZ' }],
    ['unknown bot key', { authorization: `Bearer svc_live_${'0'.repeat(48)}` }],
    ['unknown owner token', { authorization: `Bearer svc_owner_${'0'.repeat(48)}` }],
    ['injection-shaped', { authorization: "Bearer ' OR 1=1 --" }],
  ];

  it.each(badHeaders)('401 Authentication required with %s', async (_name, headers) => {
    for (const route of protectedRoutes(svc)) {
      const [method, path] = route.split(' ') as [string, string];
      const sample = SAMPLES[route] ?? {};
      const res = await svc.app.inject({
        method: method as 'GET',
        url: fill(path, bot.bot_id) + (sample.query ? `?${sample.query}` : ''),
        headers,
        ...(sample.body ? { payload: sample.body } : {}),
      });
      expect(res.statusCode, route).toBe(401);
      expect(res.json().error, route).toBe('Authentication required');
    }
  });

  it('a bot key does not open owner routes, an owner token does not open bot routes', async () => {
    for (const route of protectedRoutes(svc)) {
      const [method, path] = route.split(' ') as [string, string];
      const sample = SAMPLES[route] ?? {};
      const wrong = path.startsWith('/api/v1/bot/') ? owner.auth : bot.auth;
      const res = await svc.app.inject({
        method: method as 'GET',
        url: fill(path, bot.bot_id),
        headers: wrong,
        ...(sample.body ? { payload: sample.body } : {}),
      });
      expect(res.statusCode, route).toBe(401);
    }
  });

  it("another owner's bot is 404 on every owner route with a bot id, and nothing changes", async () => {
    const snapshot = async () =>
      svc.ctx.db.query(
        'SELECT w.status, w.available_micros, b.api_key_hash, b.webhook_secret_enc FROM wallets w JOIN bots b ON b.id = w.bot_id WHERE b.id = $1',
        [foreignBot.bot_id],
      );
    const before = await snapshot();
    for (const route of protectedRoutes(svc)) {
      if (!route.includes('{bot_id}')) continue;
      const [method, path] = route.split(' ') as [string, string];
      const sample = SAMPLES[route] ?? {};
      const res = await svc.app.inject({
        method: method as 'GET',
        url: fill(path, foreignBot.bot_id) + (sample.query ? `?${sample.query}` : ''),
        headers: owner.auth,
        ...(sample.body ? { payload: sample.body } : {}),
      });
      expect(res.statusCode, route).toBe(404);
      expect(res.json().error, route).toBe('not_found');
    }
    expect(await snapshot()).toEqual(before);
  });

  it('a bot sees only its own status', async () => {
    const mine = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    expect(mine.json().bot_id).toBe(bot.bot_id);
    const theirs = await svc.app.inject({ url: '/api/v1/bot/status', headers: foreignBot.auth });
    expect(theirs.json().bot_id).toBe(foreignBot.bot_id);
  });

  it('a rotated API key stops working at once on this instance', async () => {
    const b = await activeBot(svc, owner);
    expect((await svc.app.inject({ url: '/api/v1/bot/status', headers: b.auth })).statusCode).toBe(200);
    const rotated = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${b.bot_id}/api-key/rotate`,
      headers: owner.auth,
    });
    expect(rotated.statusCode).toBe(200);
    const newKey = rotated.json().api_key as string;
    expect(newKey).toMatch(/^svc_live_[0-9a-f]{48}$/);
    expect((await svc.app.inject({ url: '/api/v1/bot/status', headers: b.auth })).statusCode).toBe(401);
    const fresh = await svc.app.inject({
      url: '/api/v1/bot/status',
      headers: { authorization: `Bearer ${newKey}` },
    });
    expect(fresh.statusCode).toBe(200);
  });

  it('a revoked owner token is refused', async () => {
    const o = await createOwner(svc);
    expect((await svc.app.inject({ url: '/api/v1/owner/bots', headers: o.auth })).statusCode).toBe(200);
    await svc.ctx.db.query('UPDATE owner_tokens SET revoked_at = now() WHERE owner_id = $1', [o.id]);
    expect((await svc.app.inject({ url: '/api/v1/owner/bots', headers: o.auth })).statusCode).toBe(401);
  });
});
