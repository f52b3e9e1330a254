import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FLASH_TTL_MS } from '../../src/dashboard/flash.ts';
import { checkout, purchase, setupCard } from '../checkout/helpers.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { type FormClient, signIn } from './browserless.ts';

// Issue 15 items 10-14 without a browser: one-time flashes (post/redirect/get) against a hostile
// second session, kept values after an error, min/step, limit-order warnings, the webhook log's
// "retrying" filter and payload, names in the activity log, the signed-in 404, the favicon.

let svc: TestService;
let alice: FormClient;
let mallory: FormClient;
let owner: Awaited<ReturnType<typeof createOwner>>;
let bot: Awaited<ReturnType<typeof activeBot>>;
let botUrl: string;
/** The bot's key after the rotation test. */
let botAuth: { auth: Record<string, string> };

beforeAll(async () => {
  svc = await createTestService();
  owner = await createOwner(svc, 'alice.forms@example.com');
  await createOwner(svc, 'mallory.forms@example.com');
  bot = await activeBot(svc, owner, { fundCents: 2000, body: { bot_name: 'Forms bot' } });
  botUrl = `/bots/${bot.bot_id}`;
  alice = await signIn(svc, 'alice.forms@example.com', '10.61.0.1');
  mallory = await signIn(svc, 'mallory.forms@example.com', '10.61.0.2');
});
afterAll(async () => {
  await svc.close();
});

async function keyWorks(key: string): Promise<boolean> {
  const res = await svc.app.inject({
    url: '/api/v1/bot/status',
    headers: { authorization: `Bearer ${key}` },
  });
  return res.statusCode === 200;
}

describe('one-time flashes (post/redirect/get)', () => {
  it('a rotated key is shown once, only to the session that rotated it; reloads rotate nothing', async () => {
    const res = await alice.submit(botUrl, `${botUrl}/api-key/rotate`);
    expect(res.statusCode).toBe(303);
    const shownAt = String(res.headers.location);
    // Another signed-in owner who learns the URL sees no key and does not use it up.
    const stolen = await mallory.get(shownAt);
    expect(stolen.statusCode).toBe(404);
    expect(stolen.body).not.toMatch(/svc_live_[0-9a-f]{48}/);
    // A signed-out browser is sent to sign in.
    const anonymous = await svc.app.inject({ url: shownAt, headers: { accept: 'text/html' } });
    expect(anonymous.statusCode).toBe(303);
    const shown = await alice.get(shownAt);
    const key = /data-testid="secret-value">(svc_live_[0-9a-f]{48})</.exec(shown.body)?.[1];
    expect(key).toBeDefined();
    expect(shown.body).toContain(`data-copy="${key}"`);
    for (let i = 0; i < 3; i++) {
      const again = await alice.get(shownAt);
      expect(again.statusCode).toBe(200);
      expect(again.body).not.toContain(key!);
    }
    expect(await keyWorks(key!)).toBe(true);
    botAuth = { auth: { authorization: `Bearer ${key}` } };
    const rotations = await svc.ctx.db.query(
      "SELECT 1 FROM audit_log WHERE bot_id = $1 AND action = 'api_key.rotated'",
      [bot.bot_id],
    );
    expect(rotations).toHaveLength(1);
    // The flash row is gone (what is left, e.g. sign-in flashes, never held the key).
    const left = await svc.ctx.db.query<{ payload_enc: string }>('SELECT payload_enc FROM dashboard_flashes');
    for (const row of left) expect(svc.ctx.secrets.decrypt(row.payload_enc)).not.toContain(key!);
  });

  it('stores the value encrypted and lets it expire unseen', async () => {
    const res = await alice.submit(botUrl, `${botUrl}/webhook-secret/rotate`);
    const rows = await svc.ctx.db.query<{ payload_enc: string }>('SELECT payload_enc FROM dashboard_flashes');
    const secretRows = rows.filter((r) => svc.ctx.secrets.decrypt(r.payload_enc).includes('whsec_'));
    expect(secretRows).toHaveLength(1);
    expect(secretRows[0]!.payload_enc).not.toContain('whsec_');
    svc.clock.advance(FLASH_TTL_MS + 1000);
    const late = await alice.get(String(res.headers.location));
    expect(late.body).not.toMatch(/whsec_[0-9a-f]{48}/);
    expect(late.body).toContain('shown once');
  });

  it('a forged or foreign flash id shows nothing', async () => {
    for (const id of ['0'.repeat(32), 'zz', `${'a'.repeat(32)}'"><script>`]) {
      const res = await alice.get(`${botUrl}?flash=${encodeURIComponent(id)}`);
      expect([200, 400]).toContain(res.statusCode);
      expect(res.body).not.toContain('<script>');
    }
  });
});

describe('forms keep what was typed and guide the amounts', () => {
  it('keeps a refused amount, with min and step on amount fields', async () => {
    const res = await alice.submit(botUrl, `${botUrl}/fund`, { amount_usd: '99999' });
    expect(res.statusCode).toBe(400);
    expect(res.body).toMatch(/id="amount_usd"[^>]*value="99999"/);
    expect(res.body).toMatch(/id="amount_usd"[^>]*min="0.01"[^>]*step="0.01"/);
    const guard = await alice.submit('/guardrails', '/guardrails', {
      per_transaction_usd: '12.345',
      daily_budget_usd: '40',
    });
    expect(guard.statusCode).toBe(400);
    expect(guard.body).toMatch(/id="per_transaction_usd"[^>]*value="12.345"/);
    expect(guard.body).toMatch(/id="daily_budget_usd"[^>]*value="40"/);
  });

  it('warns after saving master guardrails whose per-purchase limit is above the per-day one', async () => {
    const res = await alice.submit('/guardrails', '/guardrails', {
      per_transaction_usd: '50',
      daily_budget_usd: '20',
    });
    expect(res.statusCode).toBe(303);
    const next = await alice.get(String(res.headers.location));
    expect(next.body).toContain('class="flash warn"');
    expect(next.body).toContain('per purchase ($50.00) is above per day ($20.00)');
    // Saved all the same.
    expect(next.body).toContain('data-testid="per-transaction">$50.00<');
    const fine = await alice.submit('/guardrails', '/guardrails', { per_transaction_usd: '5' });
    expect(String(fine.headers.location)).toBe('/guardrails?notice=guardrails');
  });

  it('warns about card limits out of order (per day above per month)', async () => {
    const card = await setupCard(svc, owner, bot.bot_id);
    const url = `${botUrl}/cards/${card.card_id}`;
    const res = await alice.submit(url, `${url}/settings`, {
      per_transaction_usd: '5',
      daily_usd: '80',
      monthly_usd: '60',
    });
    expect(res.statusCode).toBe(303);
    const next = await alice.get(String(res.headers.location));
    expect(next.body).toContain('per day ($80.00) is above per month ($60.00)');
    const bad = await alice.submit(url, `${url}/settings`, { per_transaction_usd: 'lots', daily_usd: '7' });
    expect(bad.statusCode).toBe(400);
    expect(bad.body).toMatch(/id="per_transaction_usd"[^>]*value="lots"/);
    expect(bad.body).toMatch(/id="daily_usd"[^>]*value="7"/);
  });
});

describe('money views, logs and pages', () => {
  it('transactions name the item and merchant and carry the balance after each', async () => {
    const card = (
      await svc.ctx.db.query<{ id: string; real_profile_index: number }>(
        'SELECT id, real_profile_index FROM cards WHERE bot_id = $1',
        [bot.bot_id],
      )
    )[0]!;
    const held = await checkout(svc, botAuth, {
      ...purchase(card.real_profile_index, 300),
      item_name: 'Tea <b>',
    });
    expect(held.statusCode, held.body).toBe(202);
    const page = await alice.get(botUrl);
    expect(page.body).toContain('Tea &lt;b&gt;</strong> <span class="muted">at ');
    const balances = [...page.body.matchAll(/data-testid="balance-after">\$([\d,.]+)</g)].map((m) =>
      Number(m[1]!.replace(/,/g, '')),
    );
    // Newest first: $20 funded, then $3 held → $17.00 after the hold, $20.00 after the funding.
    expect(balances).toEqual([17, 20]);
    expect(page.body).toContain('data-testid="balance">$17.00<');
  });

  it('the webhook log filters retrying deliveries and shows the payload that was sent', async () => {
    const rows = await svc.ctx.db.query<{ id: string }>(
      'SELECT id FROM webhook_deliveries WHERE bot_id = $1 ORDER BY created_at LIMIT 1',
      [bot.bot_id],
    );
    expect(rows.length).toBeGreaterThan(0);
    await svc.ctx.db.query(
      `UPDATE webhook_deliveries SET status = 'pending', attempts = 2, response_status = 502,
              error = $2, response_excerpt = 'bad gateway' WHERE id = $1`,
      [rows[0]!.id, `HTTP 502 ${'x'.repeat(300)}`],
    );
    const all = await alice.get(`${botUrl}/webhooks`);
    const retrying = await alice.get(`${botUrl}/webhooks?status=retrying`);
    expect(retrying.statusCode).toBe(200);
    const listed = [...retrying.body.matchAll(/data-delivery="(whd_[a-z2-7]+)"/g)].map((m) => m[1]);
    expect(listed).toEqual([rows[0]!.id]);
    expect(all.body.match(/data-testid="delivery"/g)!.length).toBeGreaterThan(listed.length);
    expect(retrying.body).toContain('data-testid="payload"');
    expect(retrying.body).toContain('&quot;event&quot;');
    expect(retrying.body).toContain('bad gateway');
    expect(retrying.body).toContain('class="err small"');
    expect((await alice.get(`${botUrl}/webhooks?status=nonsense`)).statusCode).toBe(400);
  });

  it('the activity log names cards and purchases and says what changed, in words', async () => {
    const activity = await alice.get('/activity');
    expect(activity.body).toContain('Changed card settings</strong> <span class="subject">test card</span>');
    expect(activity.body).toContain('Per day: $80.00');
    expect(activity.body).not.toMatch(/card_id|auto_approve|ask_for_everything/);
    expect(activity.body).toContain(`<a href="/bots/${bot.bot_id}">Forms bot</a>`);
  });

  it('the approvals menu counts what waits, on every page', async () => {
    for (const url of ['/', '/pairing', '/activity', botUrl]) {
      expect((await alice.get(url)).body, url).toMatch(/data-testid="nav-count"[^>]*>1</);
    }
    expect((await mallory.get('/')).body).not.toContain('data-testid="nav-count"');
  });

  it('a path no route has keeps the signed-in header, with the security headers', async () => {
    const res = await alice.get('/no/such/page');
    expect(res.statusCode).toBe(404);
    expect(res.body).toContain('Sign out');
    expect(res.body).toContain('alice.forms@example.com');
    expect(String(res.headers['content-security-policy'])).toContain("script-src 'self'");
    const anonymous = await svc.app.inject({ url: '/no/such/page', headers: { accept: 'text/html' } });
    expect(anonymous.statusCode).toBe(404);
    expect(anonymous.body).not.toContain('Sign out');
    const api = await svc.app.inject({ url: '/api/v1/nothing', headers: { accept: 'text/html' } });
    expect(api.json()).toMatchObject({ error: 'not_found' });
  });

  it('serves the favicon and the page script from this origin, and pages link them', async () => {
    const icon = await svc.app.inject({ url: '/favicon.ico' });
    expect(icon.statusCode).toBe(200);
    expect(String(icon.headers['content-type'])).toContain('image/svg+xml');
    expect(icon.headers['set-cookie']).toBeUndefined();
    const js = await svc.app.inject({ url: '/assets/dashboard.js' });
    expect(js.statusCode).toBe(200);
    expect(String(js.headers['content-type'])).toContain('javascript');
    const page = await alice.get('/');
    expect(page.body).toContain('<link rel="icon" href="/favicon.svg" type="image/svg+xml">');
    expect(page.body).toContain('<script src="/assets/dashboard.js" defer></script>');
    expect(page.body).not.toMatch(/<script>|style="/);
  });
});
