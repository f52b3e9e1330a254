import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeTable } from '../../src/app.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  registerBot,
  type TestService,
} from '../support/service.ts';
import { csrfIn, FormClient, signIn } from './browserless.ts';

// Dashboard security: CSRF on forms and on session-authenticated JSON calls, another owner's bot
// is 404 on every page and action, pages need a session, headers, escaping.

let svc: TestService;
let alice: FormClient;
let aliceOwner: Awaited<ReturnType<typeof createOwner>>;
let mallory: FormClient;
let bot: Awaited<ReturnType<typeof activeBot>>;

beforeAll(async () => {
  svc = await createTestService();
  aliceOwner = await createOwner(svc, 'alice@example.com');
  bot = await activeBot(svc, aliceOwner, {
    fundCents: 1000,
    body: { bot_name: '<script>alert(1)</script>' },
  });
  alice = await signIn(svc, 'alice@example.com', '10.40.0.1');
  mallory = await signIn(svc, 'mallory@example.com', '10.40.0.2');
});
afterAll(async () => {
  await svc.close();
});

async function wallet() {
  const rows = await svc.ctx.db.query<{ available_micros: number; status: string }>(
    'SELECT available_micros::bigint AS available_micros, status FROM wallets WHERE bot_id = $1',
    [bot.bot_id],
  );
  return rows[0]!;
}

async function auditCount() {
  const rows = await svc.ctx.db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM audit_log WHERE bot_id = $1',
    [bot.bot_id],
  );
  return rows[0]!.n;
}

const botActions = (id: string): Array<[string, Record<string, string>]> => [
  [`/bots/${id}/fund`, { amount_usd: '5' }],
  [`/bots/${id}/freeze`, {}],
  [`/bots/${id}/unfreeze`, {}],
  [`/bots/${id}/rails/card_wallet`, { status: 'inactive' }],
  [`/bots/${id}/rails/partner_wallet`, { status: 'active' }],
  [`/bots/${id}/x402/import`, { private_key: `0x${'1'.repeat(64)}` }],
  [`/bots/${id}/x402/settings`, { daily_usd: '1' }],
  [`/bots/${id}/x402/refresh`, {}],
  [`/bots/${id}/api-key/rotate`, {}],
  [`/bots/${id}/webhook-secret/rotate`, {}],
];

describe('CSRF', () => {
  it('refuses every bot form without the token, with a wrong one, or with another session’s', async () => {
    const before = { wallet: await wallet(), audit: await auditCount() };
    const malloryToken = csrfIn((await mallory.get('/')).body, '/signout');
    for (const [url, fields] of botActions(bot.bot_id)) {
      for (const token of [undefined, 'x'.repeat(43), malloryToken]) {
        const res = await alice.post(url, { ...fields, ...(token ? { _csrf: token } : {}) });
        expect(res.statusCode, `${url} with ${token}`).toBe(403);
        expect(res.body).toContain('This form has expired');
      }
    }
    expect(await wallet()).toEqual(before.wallet);
    expect(await auditCount()).toBe(before.audit);
    const key = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    expect(key.statusCode).toBe(200);
  });

  it('refuses a valid token from a foreign Origin', async () => {
    const page = await alice.get(`/bots/${bot.bot_id}`);
    const res = await alice.post(
      `/bots/${bot.bot_id}/fund`,
      { amount_usd: '5', _csrf: csrfIn(page.body, `/bots/${bot.bot_id}/fund`) },
      { origin: 'https://evil.example' },
    );
    expect(res.statusCode).toBe(403);
    expect((await wallet()).available_micros).toBe(1000 * 10_000);
  });

  it('refuses owner-level forms without the token', async () => {
    for (const [url, fields] of [
      ['/pairing', {}],
      ['/guardrails', { per_transaction_usd: '1' }],
      ['/claim', { claim_token: 'svc_claim_x' }],
      ['/signout', {}],
    ] as const) {
      const res = await alice.post(url, fields);
      expect(res.statusCode, url).toBe(403);
    }
    expect((await alice.get('/')).statusCode).toBe(200); // still signed in
    const codes = await svc.ctx.db.query('SELECT 1 FROM pairing_codes WHERE owner_id = $1', [aliceOwner.id]);
    expect(codes).toHaveLength(0);
  });

  it('refuses sign-in forms without the pre-session token (no mail, link not used)', async () => {
    const stranger = new FormClient(svc, '10.40.0.9');
    const before = svc.mailer.sent.length;
    const res = await stranger.post('/signin', { email: 'victim@example.com' });
    expect(res.statusCode).toBe(403);
    expect(svc.mailer.sent.length).toBe(before);

    // Login CSRF: a token from the attacker's own cookie does not work with the victim's cookie.
    const attacker = new FormClient(svc, '10.40.0.10');
    const attackerPage = await attacker.get('/signin');
    const victim = new FormClient(svc, '10.40.0.11');
    await victim.get('/signin');
    const forged = await victim.post('/signin/verify', {
      token: 'a'.repeat(64),
      _csrf: csrfIn(attackerPage.body, '/signin'),
    });
    expect(forged.statusCode).toBe(403);
  });

  it('requires X-CSRF-Token on state-changing JSON calls made with the session cookie', async () => {
    const cookie = alice.cookieHeader();
    const list = await svc.app.inject({ url: '/api/v1/owner/bots', headers: { cookie } });
    expect(list.statusCode).toBe(200);
    expect(list.json().bots.map((b: { bot_id: string }) => b.bot_id)).toEqual([bot.bot_id]);

    const url = `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`;
    const missing = await svc.app.inject({
      method: 'POST',
      url,
      headers: { cookie },
      payload: { amount_cents: 100 },
    });
    expect(missing.statusCode).toBe(403);
    expect(missing.json()).toMatchObject({ error: 'csrf_failed' });
    const wrong = await svc.app.inject({
      method: 'POST',
      url,
      headers: { cookie, 'x-csrf-token': 'nope' },
      payload: { amount_cents: 100 },
    });
    expect(wrong.statusCode).toBe(403);
    expect((await wallet()).available_micros).toBe(1000 * 10_000);

    const token = csrfIn((await alice.get('/')).body, '/signout');
    const ok = await svc.app.inject({
      method: 'POST',
      url,
      headers: { cookie, 'x-csrf-token': token },
      payload: { amount_cents: 100 },
    });
    expect(ok.statusCode).toBe(200);
    expect((await wallet()).available_micros).toBe(1100 * 10_000);

    // A bearer token needs no CSRF token, even with a cookie present.
    const bearer = await svc.app.inject({
      method: 'POST',
      url,
      headers: { cookie, ...aliceOwner.auth },
      payload: { amount_cents: 100 },
    });
    expect(bearer.statusCode).toBe(200);

    // A cross-site form post (url-encoded) never reaches the JSON API.
    const form = await svc.app.inject({
      method: 'POST',
      url,
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', 'x-csrf-token': token },
      payload: 'amount_cents=100',
    });
    expect(form.statusCode).toBe(415);
    expect((await wallet()).available_micros).toBe(1200 * 10_000);

    // Another owner's session sees none of it.
    const other = await svc.app.inject({
      url: `/api/v1/owner/bots/${bot.bot_id}`,
      headers: { cookie: mallory.cookieHeader() },
    });
    expect(other.statusCode).toBe(404);
  });
});

describe("another owner's bot", () => {
  it('is 404 on every page and every action, and nothing changes', async () => {
    const before = { wallet: await wallet(), audit: await auditCount() };
    const token = csrfIn((await mallory.get('/')).body, '/signout');
    const page = await mallory.get(`/bots/${bot.bot_id}`);
    expect(page.statusCode).toBe(404);
    expect(page.body).toContain('belongs to another account');
    expect(page.body).not.toContain('alert(1)');
    for (const [url, fields] of botActions(bot.bot_id)) {
      const res = await mallory.post(url, { ...fields, _csrf: token });
      expect(res.statusCode, url).toBe(404);
      expect(res.headers['content-type']).toMatch(/text\/html/);
    }
    expect(await wallet()).toEqual(before.wallet);
    expect(await auditCount()).toBe(before.audit);
    expect((await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).statusCode).toBe(200);
    const overview = await mallory.get('/');
    expect(overview.body).not.toContain(bot.bot_id);
    const activity = await mallory.get('/activity');
    expect(activity.body).not.toContain('alert(1)');
  });

  it('and an unknown bot are the same 404; so is a malformed id (a mistyped address, not a form)', async () => {
    const unknown = await alice.get('/bots/bot_aaaaaaaaaaaaaaaa');
    expect(unknown.statusCode).toBe(404);
    const malformed = await alice.get('/bots/not-a-bot');
    expect(malformed.statusCode).toBe(404);
    expect(malformed.headers['content-type']).toMatch(/text\/html/);
    expect(malformed.body).toBe(unknown.body);
  });

  it('an unclaimed bot cannot be claimed twice', async () => {
    const pending = await registerBot(svc, { owner_email: 'alice@example.com' });
    const claimPage = await mallory.get(`/claim?token=${pending.claim_token}`);
    const first = await mallory.post('/claim', {
      _csrf: csrfIn(claimPage.body, '/claim'),
      claim_token: pending.claim_token!,
    });
    expect(first.statusCode).toBe(303);
    const second = await alice.post('/claim', {
      _csrf: csrfIn((await alice.get('/claim')).body, '/claim'),
      claim_token: pending.claim_token!,
    });
    expect(second.statusCode).toBe(400);
    expect(second.body).toContain('not valid');
  });
});

describe('pages without a session', () => {
  it('send a browser to sign-in and refuse form posts', async () => {
    const anon = new FormClient(svc, '10.40.0.20');
    for (const url of ['/', '/pairing', '/guardrails', '/activity', `/bots/${bot.bot_id}`]) {
      const res = await anon.get(url);
      expect(res.statusCode, url).toBe(303);
      expect(res.headers.location).toBe(url === '/' ? '/signin' : `/signin?next=${encodeURIComponent(url)}`);
    }
    const post = await anon.post(`/bots/${bot.bot_id}/fund`, { amount_usd: '1' });
    expect(post.statusCode).toBe(401);
    const forged = await anon.post(
      `/bots/${bot.bot_id}/freeze`,
      {},
      { cookie: `botpay_session=${'f'.repeat(64)}` },
    );
    expect(forged.statusCode).toBe(401);
    expect((await wallet()).status).toBe('active');
  });
});

describe('pages', () => {
  it('escape what bots write and send security headers', async () => {
    const res = await alice.get(`/bots/${bot.bot_id}`);
    expect(res.statusCode).toBe(200);
    expect(res.body).not.toContain('<script>alert(1)</script>');
    expect(res.body).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(res.headers['content-security-policy']).toContain("default-src 'none'");
    expect(res.headers['content-security-policy']).toContain("frame-ancestors 'none'");
    expect(res.headers['x-frame-options']).toBe('DENY');
    expect(res.headers['referrer-policy']).toBe('same-origin');
    expect(res.headers['cache-control']).toBe('no-store');
  });

  it('share one cacheable stylesheet that sets no cookie', async () => {
    const css = await svc.app.inject({ url: '/assets/dashboard.css' });
    expect(css.statusCode).toBe(200);
    expect(css.headers['content-type']).toMatch(/text\/css/);
    expect(css.headers['cache-control']).toBe('public, max-age=3600');
    expect(css.headers['set-cookie']).toBeUndefined();
    expect(css.body).toMatch(/@media ?\(min-width: ?720px\)/);
  });

  it('show a friendly 404 to browsers and JSON to API clients', async () => {
    const page = await alice.get('/no/such/page');
    expect(page.statusCode).toBe(404);
    expect(page.headers['content-type']).toMatch(/text\/html/);
    expect(page.body).toContain('Not found');
    const api = await svc.app.inject({ url: '/api/v1/owner/nothing', headers: aliceOwner.auth });
    expect(api.statusCode).toBe(404);
    expect(api.json()).toMatchObject({ error: 'not_found' });
  });

  it('are all in the route table and none in the OpenAPI document, which describes the API only', async () => {
    const doc = (await svc.app.inject({ url: '/openapi.json' })).json() as { paths: Record<string, unknown> };
    const table = new Set(
      routeTable(svc.app)
        .filter((r) => r.dashboard)
        .map((r) => r.url.replace(/:(\w+)/g, '{$1}')),
    );
    for (const path of [
      '/',
      '/signin',
      '/signin/verify',
      '/signin/check-email',
      '/signout',
      '/claim',
      '/pairing',
      '/guardrails',
      '/activity',
      '/bots/{bot_id}',
      '/bots/{bot_id}/fund',
      '/bots/{bot_id}/freeze',
      '/bots/{bot_id}/unfreeze',
      '/bots/{bot_id}/rails/{rail_key}',
      '/bots/{bot_id}/api-key/rotate',
      '/bots/{bot_id}/webhook-secret/rotate',
      '/assets/dashboard.css',
    ]) {
      expect(table.has(path), path).toBe(true);
      expect(doc.paths[path], path).toBeUndefined();
    }
  });
});
