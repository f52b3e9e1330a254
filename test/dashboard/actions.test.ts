import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  activeBot,
  createOwner,
  createTestService,
  registerBot,
  type TestService,
} from '../support/service.ts';
import { checkout, purchase, setupCard } from '../checkout/helpers.ts';
import { csrfIn, type FormClient, formFields, signIn } from './browserless.ts';
import { updateMasterGuardrails } from '../../src/owners/guardrails.ts';

// Every dashboard action through its form: the right change, the audit entry, friendly errors
// that change nothing.

let svc: TestService;
let client: FormClient;
let owner: Awaited<ReturnType<typeof createOwner>>;
let bot: Awaited<ReturnType<typeof activeBot>>;
let botUrl: string;

beforeAll(async () => {
  svc = await createTestService();
  owner = await createOwner(svc, 'dora@example.com');
  bot = await activeBot(svc, owner, { body: { bot_name: 'Dora’s shopper', description: 'Buys groceries' } });
  botUrl = `/bots/${bot.bot_id}`;
  client = await signIn(svc, 'dora@example.com', '10.50.0.1');
});
afterAll(async () => {
  await svc.close();
});

async function state() {
  const rows = await svc.ctx.db.query<{ available_micros: number; status: string }>(
    'SELECT available_micros::bigint AS available_micros, status FROM wallets WHERE bot_id = $1',
    [bot.bot_id],
  );
  return rows[0]!;
}

async function lastAudit() {
  const rows = await svc.ctx.db.query<{ action: string; details: Record<string, unknown> }>(
    'SELECT action, details FROM audit_log WHERE owner_id = $1 ORDER BY id DESC LIMIT 1',
    [owner.id],
  );
  return rows[0];
}

describe('overview', () => {
  it('lists the bot with status, balance, webhook health and pending approvals', async () => {
    const res = await client.get('/');
    expect(res.statusCode).toBe(200);
    expect(res.body).toContain('Dora’s shopper');
    expect(res.body).toContain('Buys groceries');
    expect(res.body).toContain('$0.00');
    expect(res.body).toContain('healthy');
    expect(res.body).toContain('Nothing is waiting for you');
    await svc.ctx.db.query(
      `UPDATE bots SET webhook_status = 'degraded', webhook_fail_count = 3 WHERE id = $1`,
      [bot.bot_id],
    );
    expect((await client.get('/')).body).toContain('degraded (3 failed)');
    await svc.ctx.db.query(
      `UPDATE bots SET webhook_status = 'active', webhook_fail_count = 0 WHERE id = $1`,
      [bot.bot_id],
    );
  });
});

describe('bot page actions', () => {
  it('adds funds in dollars', async () => {
    const res = await client.submit(botUrl, `${botUrl}/fund`, { amount_usd: '$1,025.50' });
    expect(res.statusCode).toBe(303);
    expect(res.headers.location).toBe(`${botUrl}?notice=funded`);
    expect((await state()).available_micros).toBe(102_550 * 10_000);
    expect(await lastAudit()).toMatchObject({
      action: 'wallet.funded',
      details: { amount_micros: 102_550 * 10_000 },
    });
    const page = await client.get(String(res.headers.location));
    expect(page.body).toContain('Funds added.');
    expect(page.body).toContain('$1,025.50');
  });

  it('rejects amounts it cannot use, changing nothing', async () => {
    for (const amount of ['', '0', '-5', '1.234', 'ten', '10000.01', '1e3']) {
      const res = await client.submit(botUrl, `${botUrl}/fund`, { amount_usd: amount });
      expect(res.statusCode, amount).toBe(400);
      expect(res.body).toContain('Enter an amount between');
    }
    expect((await state()).available_micros).toBe(102_550 * 10_000);
  });

  it('freezes and unfreezes the wallet', async () => {
    const frozen = await client.submit(botUrl, `${botUrl}/freeze`);
    expect(frozen.headers.location).toBe(`${botUrl}?notice=frozen`);
    expect((await state()).status).toBe('frozen');
    expect((await lastAudit())?.action).toBe('wallet.frozen');
    const page = await client.get(botUrl);
    expect(page.body).toContain('Unfreeze wallet');
    const status = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    expect(status.json().status).toBe('frozen');
    const thawed = await client.submit(botUrl, `${botUrl}/unfreeze`);
    expect(thawed.headers.location).toBe(`${botUrl}?notice=unfrozen`);
    expect((await state()).status).toBe('active');
  });

  it('turns rails on and off; the partner wallet needs X402_NETWORK (test/dashboard/x402.test.ts has one)', async () => {
    const page = await client.get(botUrl);
    expect(page.body).toContain('no X402_NETWORK configured');
    // No button is offered; a hand-made post gets the reason.
    const missing = await client.post(`${botUrl}/rails/partner_wallet`, {
      _csrf: csrfIn(page.body, `${botUrl}/fund`),
      status: 'active',
    });
    expect(missing.statusCode).toBe(409);
    expect(missing.body).toContain('X402_NETWORK');
    const rails = await svc.ctx.db.query<{ rail_key: string }>(
      `SELECT rail_key FROM rails WHERE bot_id = $1 AND rail_key = 'partner_wallet'`,
      [bot.bot_id],
    );
    expect(rails).toEqual([]);
    const bad = await client.submit(botUrl, `${botUrl}/rails/card_wallet`, { status: 'sideways' });
    expect(bad.statusCode).toBe(400);
  });

  it('rotates the API key: shown once, the old key stops working', async () => {
    const res = await client.submit(botUrl, `${botUrl}/api-key/rotate`);
    // Post/redirect/get: the POST answers a redirect, the page it leads to shows the key once.
    expect(res.statusCode).toBe(303);
    const shownAt = String(res.headers.location);
    expect(shownAt).toMatch(new RegExp(`^${botUrl}\\?flash=[0-9a-f]{32}$`));
    const shown = await client.get(shownAt);
    expect(shown.statusCode).toBe(200);
    const key = /data-testid="secret-value">(svc_live_[0-9a-f]{48})</.exec(shown.body)?.[1];
    expect(key).toBeDefined();
    // Reloading the page neither shows the key again nor rotates it: the key still works.
    const reload = await client.get(shownAt);
    expect(reload.body).not.toContain(key!);
    expect(reload.body).toContain('shown once');
    expect((await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).statusCode).toBe(401);
    const fresh = await svc.app.inject({
      url: '/api/v1/bot/status',
      headers: { authorization: `Bearer ${key}` },
    });
    expect(fresh.statusCode).toBe(200);
    const again = await client.get(botUrl);
    expect(again.body).not.toContain(key!);
    expect((await lastAudit())?.action).toBe('api_key.rotated');
    expect(svc.logs()).not.toContain(key!);
  });

  it('rotates the webhook secret: shown once, stored encrypted', async () => {
    const res = await client.submit(botUrl, `${botUrl}/webhook-secret/rotate`);
    expect(res.statusCode).toBe(303);
    const shown = await client.get(String(res.headers.location));
    const secret = /data-testid="secret-value">(whsec_[0-9a-f]{48})</.exec(shown.body)?.[1];
    expect(secret).toBeDefined();
    const row = await svc.ctx.db.query<{ webhook_secret_enc: string }>(
      'SELECT webhook_secret_enc FROM bots WHERE id = $1',
      [bot.bot_id],
    );
    expect(svc.ctx.secrets.decrypt(row[0]!.webhook_secret_enc)).toBe(secret);
    expect((await client.get(botUrl)).body).not.toContain(secret!);
  });

  it('shows transactions and the audit log on the bot page', async () => {
    const page = await client.get(botUrl);
    // What moved, and the available balance after each movement.
    expect(page.body).toContain('data-testid="transaction"');
    expect(page.body).toMatch(/data-testid="balance-after">\$[\d,.]+</);
    for (const words of ['Added funds', 'Froze the wallet', 'Unfroze the wallet', 'Rotated the API key']) {
      expect(page.body).toContain(words);
    }
  });
});

describe('pairing codes', () => {
  it('creates a code shown once that pairs a new bot', async () => {
    const res = await client.submit('/pairing', '/pairing');
    expect(res.statusCode).toBe(303);
    const shownAt = String(res.headers.location);
    const shown = await client.get(shownAt);
    const code = /data-testid="pairing-code">(\d{6})</.exec(shown.body)?.[1];
    expect(code).toBeDefined();
    // A reload creates no second code and shows this one no more.
    const codesBefore = await svc.ctx.db.query('SELECT 1 FROM pairing_codes');
    const reload = await client.get(shownAt);
    expect(reload.body).not.toContain(code!);
    expect(await svc.ctx.db.query('SELECT 1 FROM pairing_codes')).toHaveLength(codesBefore.length);
    const paired = await registerBot(svc, {
      owner_email: 'dora@example.com',
      pairing_code: code,
      bot_name: 'paired-one',
    });
    expect(paired.status).toBe('active');
    const list = await client.get('/pairing');
    expect(list.body).not.toContain(code!);
    expect(list.body).toContain('paired-one');
    expect((await client.get('/')).body).toContain('paired-one');
  });

  it('says so when the hourly limit is reached', async () => {
    let last = 303;
    for (let i = 0; i < 5 && last === 303; i++)
      last = (await client.submit('/pairing', '/pairing')).statusCode;
    expect(last).toBe(429);
  });
});

describe('master guardrails', () => {
  it('saves only the amounts given, from the guardrails page and from a bot page', async () => {
    const res = await client.submit('/guardrails', '/guardrails', {
      per_transaction_usd: '12.50',
      daily_budget_usd: '',
    });
    expect(res.headers.location).toBe('/guardrails?notice=guardrails');
    const page = await client.get('/guardrails?notice=guardrails');
    expect(page.body).toContain('Master guardrails saved.');
    expect(page.body).toContain('$12.50');
    const fromBot = await client.post('/guardrails', {
      _csrf: csrfIn((await client.get(botUrl)).body, '/guardrails'),
      monthly_budget_usd: '300',
      return_to: bot.bot_id,
    });
    expect(fromBot.headers.location).toBe(`${botUrl}?notice=guardrails`);
    const row = await svc.ctx.db.query<Record<string, number>>(
      'SELECT (master_per_transaction_micros / 10000.0)::float8 AS p, (master_daily_micros / 10000.0)::float8 AS d, (master_monthly_micros / 10000.0)::float8 AS m FROM owners WHERE id = $1',
      [owner.id],
    );
    expect(row[0]).toEqual({ p: 1250, d: 2000, m: 30000 });
    expect(await lastAudit()).toMatchObject({ action: 'master_guardrails.updated' });
  });

  it('refuses bad amounts and empty forms without changing anything', async () => {
    for (const fields of <Array<Record<string, string>>>[
      { per_transaction_usd: 'lots' },
      { daily_budget_usd: '1000001' },
      {},
    ]) {
      const res = await client.submit('/guardrails', '/guardrails', fields);
      expect(res.statusCode).toBe(400);
    }
    const row = await svc.ctx.db.query<{ p: number }>(
      'SELECT (master_per_transaction_micros / 10000.0)::float8 AS p FROM owners WHERE id = $1',
      [owner.id],
    );
    expect(row[0]!.p).toBe(1250);
  });
});

describe('the guardrails form shows the current amounts', () => {
  async function amounts() {
    const rows = await svc.ctx.db.query<{ p: number; d: number; m: number }>(
      'SELECT (master_per_transaction_micros / 10000.0)::float8 AS p, (master_daily_micros / 10000.0)::float8 AS d, (master_monthly_micros / 10000.0)::float8 AS m FROM owners WHERE id = $1',
      [owner.id],
    );
    return rows[0]!;
  }
  async function auditCount() {
    const rows = await svc.ctx.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM audit_log WHERE owner_id = $1 AND action = 'master_guardrails.updated'",
      [owner.id],
    );
    return rows[0]!.n;
  }

  it('prefills every field; sent as shown it changes nothing', async () => {
    const before = await amounts();
    const audits = await auditCount();
    for (const [pageUrl, extra] of [
      ['/guardrails', {}],
      [botUrl, { return_to: bot.bot_id }],
    ] as const) {
      const page = await client.get(pageUrl);
      const fields = formFields(page.body, '/guardrails');
      expect(fields).toMatchObject({
        per_transaction_usd: (before.p / 100).toFixed(2),
        daily_budget_usd: (before.d / 100).toFixed(2),
        monthly_budget_usd: (before.m / 100).toFixed(2),
        ...extra,
      });
      expect(page.body).not.toContain('placeholder="unchanged"');
      const res = await client.post('/guardrails', fields);
      expect(res.statusCode).toBe(303);
      expect(res.headers.location).toBe(`${pageUrl}?notice=unchanged`);
    }
    expect((await client.get('/guardrails?notice=unchanged')).body).toContain('Nothing to save');
    expect(await amounts()).toEqual(before);
    expect(await auditCount()).toBe(audits);
  });

  it('changes only the field changed, even if another field changed elsewhere since the page was shown', async () => {
    const before = await amounts();
    const fields = formFields((await client.get('/guardrails')).body, '/guardrails');
    // Meanwhile (another tab, the owner API) the daily budget changes.
    await updateMasterGuardrails(svc.ctx, owner.id, { daily_budget_cents: before.d + 700 });
    const res = await client.post('/guardrails', { ...fields, per_transaction_usd: '11' });
    expect(res.headers.location).toBe('/guardrails?notice=guardrails');
    expect(await amounts()).toEqual({ p: 1100, d: before.d + 700, m: before.m });
    // An emptied field keeps its amount, as the form says.
    const again = formFields((await client.get('/guardrails')).body, '/guardrails');
    const emptied = await client.post('/guardrails', {
      ...again,
      per_transaction_usd: '',
      monthly_budget_usd: '400',
    });
    expect(emptied.headers.location).toBe('/guardrails?notice=guardrails');
    expect(await amounts()).toEqual({ p: 1100, d: before.d + 700, m: 40_000 });
    // A refused amount shows the form again with what was typed and the amounts first shown.
    const refused = await client.post('/guardrails', { ...again, daily_budget_usd: 'lots' });
    expect(refused.statusCode).toBe(400);
    expect(formFields(refused.body, '/guardrails')).toMatchObject({
      daily_budget_usd: 'lots',
      shown_monthly_budget_usd: again.shown_monthly_budget_usd,
    });
    await updateMasterGuardrails(svc.ctx, owner.id, {
      per_transaction_cents: before.p,
      daily_budget_cents: before.d,
      monthly_budget_cents: before.m,
    });
  });
});

describe('activity', () => {
  it('lists account and bot actions, newest first', async () => {
    const page = await client.get('/activity');
    expect(page.statusCode).toBe(200);
    const text = page.body;
    expect(text).toContain('Signed in');
    expect(text).toContain('Created a pairing code');
    expect(text.indexOf('Changed master guardrails')).toBeLessThan(text.indexOf('Signed in'));
  });
});

describe('the overview counts what waits for the owner', () => {
  it('a top-up request is named in the lead, never "Nothing is waiting" beside its badge', async () => {
    const owner2 = await createOwner(svc, 'topups.overview@example.com');
    const asker = await activeBot(svc, owner2, { body: { bot_name: 'Asker' } });
    const asked = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bot/wallet/topup-requests',
      headers: asker.auth,
      payload: { amount_cents: 500, reason: 'groceries' },
    });
    expect(asked.statusCode, asked.body).toBe(201);
    const own = await signIn(svc, 'topups.overview@example.com', '10.50.0.9');
    const overview = await own.get('/');
    expect(overview.body).toContain('1 top-up request');
    expect(overview.body).toMatch(/data-testid="waiting-link">1 top-up request waiting for your decision/);
    expect(overview.body).not.toContain('Nothing is waiting for you');
    // A refused form shown again keeps the Approvals badge.
    const refused = await own.submit(`/bots/${asker.bot_id}`, `/bots/${asker.bot_id}/fund`, {
      amount_usd: 'ten',
    });
    expect(refused.statusCode).toBe(400);
    expect(refused.body).toMatch(/Approvals <span class="count" data-testid="nav-count"[^>]*>1<\/span>/);
  });

  it('a mistyped bot address is a page that does not exist, not a form error', async () => {
    for (const path of ['/bots/oops', '/bots/bot_%20x/webhooks']) {
      const res = await client.get(path);
      expect(res.statusCode, path).toBe(404);
      expect(res.body).not.toContain('Something in the form was not right');
    }
  });
});

describe('pending approvals', () => {
  it('are counted on the overview and the bot page shows the held money', async () => {
    // A purchase held for approval, made by a bot through the checkout engine (a fresh bot: the
    // first one's key was rotated above).
    const buyer = await activeBot(svc, owner, { fundCents: 1000, body: { bot_name: 'Buyer' } });
    const card = await setupCard(svc, owner, buyer.bot_id);
    const held = await checkout(svc, buyer, purchase(card.real_profile_index, 250));
    expect(held.statusCode, held.body).toBe(202);
    const overview = await client.get('/');
    // The sentence links to the inbox, and the Approvals menu entry carries the count.
    expect(overview.body).toMatch(
      /<a href="\/approvals" data-testid="waiting-link">1 purchase waiting for your decision/,
    );
    expect(overview.body).toContain('1 approval');
    expect(overview.body).toMatch(
      /href="\/approvals"[^>]*>Approvals <span class="count" data-testid="nav-count"[^>]*>1<\/span>/,
    );
    const page = await client.get(`/bots/${buyer.bot_id}`);
    expect(page.body).toContain('1 purchase is waiting for your approval');
    expect(page.body).toContain('data-testid="nav-count"');
    expect(page.body).toContain('$2.50');
  });

  it('a purchase approved after a hold is counted once in the transactions, each row saying what it is', async () => {
    const buyer = await activeBot(svc, owner, { fundCents: 2000, body: { bot_name: 'Twice' } });
    const card = await setupCard(svc, owner, buyer.bot_id);
    // A second between movements: the list is newest first.
    svc.clock.advance(1000);
    const held = await checkout(svc, buyer, purchase(card.real_profile_index, 450));
    expect(held.statusCode, held.body).toBe(202);
    const confirmation = (held.json() as { confirmation_id: string }).confirmation_id;
    svc.clock.advance(1000);
    const approved = await client.submit('/approvals', `/approvals/${confirmation}/approve`);
    expect(approved.statusCode, approved.body).toBe(303);
    svc.clock.advance(1000);
    const released = await checkout(svc, buyer, purchase(card.real_profile_index, 300));
    expect(released.statusCode, released.body).toBe(202);
    svc.clock.advance(1000);
    const denied = await client.submit(
      '/approvals',
      `/approvals/${(released.json() as { confirmation_id: string }).confirmation_id}/deny`,
    );
    expect(denied.statusCode, denied.body).toBe(303);
    const page = await client.get(`/bots/${buyer.bot_id}`);
    const text = (h: string) =>
      h
        .replace(/<[^>]+>/g, ' ')
        .replace(/\s+/g, ' ')
        .trim();
    const rows = [
      ...page.body.matchAll(/<tr data-testid="transaction" data-kind="([a-z]+)">(.*?)<\/tr>/gs),
    ].map((m) => {
      const cells = Object.fromEntries(
        [...m[2]!.matchAll(/<td data-label="([^"]*)"[^>]*>(.*?)<\/td>/gs)].map((c) => [c[1]!, text(c[2]!)]),
      );
      const row: Record<string, string> = { ...cells, kind: m[1]! };
      return row;
    });
    expect(rows.map((r) => r.kind)).toEqual(['release', 'hold', 'capture', 'hold', 'funding']);
    // The $4.50 leaves the balance once, on the hold; the capture says it was paid from the hold.
    expect(rows.filter((r) => r.Amount?.startsWith('−$4.50')).map((r) => r.kind)).toEqual(['hold']);
    expect(rows[2]).toMatchObject({
      What: expect.stringContaining('Approved: paid from the hold'),
      Amount: '$4.50 paid from the hold',
      'Balance after': '$15.50',
      'Held change': '−$4.50',
    });
    expect(rows[3]).toMatchObject({
      What: expect.stringContaining('Held for your approval'),
      Amount: '−$4.50 held',
      'Balance after': '$15.50',
      'Held change': '+$4.50',
    });
    expect(rows[0]).toMatchObject({
      What: expect.stringContaining('Hold released: back in the wallet'),
      Amount: '+$3.00',
      'Held change': '−$3.00',
    });
  });
});

describe('recently decided in the approvals inbox', () => {
  it('lists top-up requests approved, declined and expired, as purchases', async () => {
    // Its own service: the clock moves by days, past the other tests' session idle time.
    const svc2 = await createTestService();
    try {
      const owner3 = await createOwner(svc2, 'topups.decided@example.com');
      const other = await createOwner(svc2, 'topups.other@example.com');
      const asker = await activeBot(svc2, owner3, { body: { bot_name: 'Asker' } });
      const stranger = await activeBot(svc2, other, { body: { bot_name: 'Stranger' } });
      const ask = async (b: typeof asker, amount_cents: number, reason: string) => {
        const res = await svc2.app.inject({
          method: 'POST',
          url: '/api/v1/bot/wallet/topup-requests',
          headers: b.auth,
          payload: { amount_cents, reason },
        });
        expect(res.statusCode, res.body).toBe(201);
        return (res.json() as { topup_id: string }).topup_id;
      };
      const late = await ask(asker, 300, 'late one');
      svc2.clock.advance(86_400_000);
      const approved = await ask(asker, 700, 'books');
      const declined = await ask(asker, 900, 'games');
      const othersTopup = await ask(stranger, 1300, 'not yours');
      const own = await signIn(svc2, 'topups.decided@example.com', '10.50.0.10');
      const inbox = await own.get('/approvals');
      expect(inbox.body).toContain('Nothing decided in the last 7 days.');
      const approve = await own.submit('/approvals', `/approvals/topups/${approved}/approve`, {});
      expect(approve.statusCode, approve.body).toBe(303);
      svc2.clock.advance(60_000);
      const decline = await own.submit('/approvals', `/approvals/topups/${declined}/decline`, { note: 'no' });
      expect(decline.statusCode, decline.body).toBe(303);
      const open = await ask(asker, 1100, 'still open');
      // The first request runs out (the expiry job has not written it yet).
      svc2.clock.advance(6 * 86_400_000);
      const page = await own.get('/approvals');
      const rows = [...page.body.matchAll(/<tr data-testid="decided" data-topup="([^"]+)">(.*?)<\/tr>/gs)];
      expect(rows.map((r) => r[1])).toEqual([late, declined, approved]);
      expect(rows[0]![2]).toMatch(/\$3\.00.*Expired \(not decided in time\).*late one.*Asker.*time ran out/s);
      expect(rows[1]![2]).toMatch(/\$9\.00.*Declined.*Top-up.*games.*by you/s);
      expect(rows[2]![2]).toMatch(/\$7\.00.*Approved.*Top-up.*books.*by you/s);
      // The open request is still offered for a decision, not listed as decided; another owner's is nowhere.
      expect(page.body).toContain(`data-testid="topup" data-topup="${open}"`);
      expect(page.body).not.toContain(`data-topup="${othersTopup}"`);
      // Eight days on, the approval is older than the inbox's 7 days.
      svc2.clock.advance(2 * 86_400_000);
      const later = await own.get('/approvals');
      expect(later.body).not.toContain(`data-topup="${approved}"`);
      expect(later.body).toMatch(new RegExp(`data-testid="decided" data-topup="${open}">.*Expired`));
    } finally {
      await svc2.close();
    }
  });
});
