import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csrfIn, type FormClient, signIn } from '../dashboard/browserless.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { ask } from './helpers.ts';

// Top-up requests in the dashboard's approvals inbox, through the real forms (CSRF and session as
// a person's browser sends them): shown escaped, approved, declined with a note, decided once,
// another owner's request refused.

let svc: TestService;
let client: FormClient;
let owner: Awaited<ReturnType<typeof createOwner>>;
let bot: Awaited<ReturnType<typeof activeBot>>;

beforeAll(async () => {
  svc = await createTestService();
  owner = await createOwner(svc, 'tess@example.com');
  bot = await activeBot(svc, owner, { body: { bot_name: 'Tess bot' } });
  client = await signIn(svc, 'tess@example.com', '10.60.0.1');
});
afterAll(async () => {
  await svc.close();
});

async function available() {
  const rows = await svc.ctx.db.query<{ n: number }>(
    'SELECT available_micros::bigint AS n FROM wallets WHERE bot_id = $1',
    [bot.bot_id],
  );
  return rows[0]!.n;
}

describe('approvals inbox: top-up requests', () => {
  it('shows an open request with the reason escaped, and says so when there is none', async () => {
    const empty = await client.get('/approvals');
    expect(empty.statusCode).toBe(200);
    expect(empty.body).toContain('No bot is asking you for funds.');
    const asked = (
      await ask(svc, bot, { amount_cents: 1999, reason: '<script>alert(1)</script> tokens' })
    ).json();
    const page = await client.get('/approvals');
    expect(page.body).toContain(`data-topup="${asked.topup_id}"`);
    expect(page.body).toContain('$19.99');
    expect(page.body).toContain('Tess bot');
    expect(page.body).toContain('&lt;script&gt;alert(1)&lt;/script&gt; tokens');
    expect(page.body).not.toContain('<script>alert(1)');
  });

  it("the overview and the owner API count the bot's open requests", async () => {
    const page = await client.get('/');
    expect(page.body).toMatch(/1 top-up request</);
    const api = await svc.app.inject({ url: `/api/v1/owner/bots/${bot.bot_id}`, headers: owner.auth });
    expect(api.json().pending_topups).toBe(1);
    const list = await svc.app.inject({ url: '/api/v1/owner/bots', headers: owner.auth });
    expect(list.json().bots[0].pending_topups).toBe(1);
  });

  it('Approve funds the wallet; a second click is 409 and changes nothing', async () => {
    const asked = (await ask(svc, bot, { amount_cents: 500, reason: 'approve me' })).json();
    const action = `/approvals/topups/${asked.topup_id}/approve`;
    const before = await available();
    const page = await client.get('/approvals');
    const csrf = csrfIn(page.body, action);
    const res = await client.post(action, { _csrf: csrf });
    expect(res.statusCode, res.body).toBe(303);
    expect(res.headers.location).toBe('/approvals?notice=topup_approved');
    expect(await available()).toBe(before + 500 * 10_000);
    const again = await client.post(action, { _csrf: csrf });
    expect(again.statusCode).toBe(409);
    expect(again.body).toContain('already approved');
    expect(await available()).toBe(before + 500 * 10_000);
    const after = await client.get('/approvals?notice=topup_approved');
    // No longer open: it has moved to "Recently decided", as approved.
    expect(after.body).not.toContain(`data-testid="topup" data-topup="${asked.topup_id}"`);
    expect(after.body).toMatch(new RegExp(`data-testid="decided"[^>]*data-topup="${asked.topup_id}"`));
    expect(after.body).toContain('Top-up approved');
  });

  it('Decline with a note tells the bot; without the CSRF token nothing happens', async () => {
    const asked = (await ask(svc, bot, { amount_cents: 700, reason: 'decline me' })).json();
    const action = `/approvals/topups/${asked.topup_id}/decline`;
    const forged = await client.post(action, { _csrf: 'wrong', note: 'x' });
    expect(forged.statusCode).toBe(403);
    const cross = await client.post(action, { note: 'x' }, { origin: 'https://evil.example' });
    expect(cross.statusCode).toBe(403);
    const res = await client.submit('/approvals', action, { note: 'Ask again next month' });
    expect(res.statusCode, res.body).toBe(303);
    const row = (
      await svc.ctx.db.query<{ status: string; note: string }>(
        'SELECT status, note FROM topup_requests WHERE id = $1',
        [asked.topup_id],
      )
    )[0]!;
    expect(row).toEqual({ status: 'declined', note: 'Ask again next month' });
  });

  it("another owner's signed-in session cannot decide this owner's request (404), and nothing changes", async () => {
    await createOwner(svc, 'mallory@example.com');
    const mallory = await signIn(svc, 'mallory@example.com', '10.60.0.2');
    const asked = (await ask(svc, bot, { amount_cents: 800, reason: 'not yours' })).json();
    const page = await mallory.get('/approvals');
    expect(page.body).not.toContain(asked.topup_id);
    const before = await available();
    const res = await mallory.post(`/approvals/topups/${asked.topup_id}/approve`, {
      _csrf: csrfIn(page.body),
    });
    expect(res.statusCode).toBe(404);
    expect(await available()).toBe(before);
  });
});
