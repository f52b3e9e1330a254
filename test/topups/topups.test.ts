import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_JOBS } from '../../src/jobs/index.ts';
import { expireDueTopups, TOPUP_TTL_MS } from '../../src/topups/service.ts';
import {
  checkout,
  events,
  expectLedgerConsistent,
  purchase,
  setupCard,
  wallet,
} from '../checkout/helpers.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  registerBot,
  type TestService,
} from '../support/service.ts';
import { ask, decide, listForBot, pendingTopups } from './helpers.ts';

// Top-up requests through the real app on the leg's database: ask, list, approve (the wallet is
// funded through the owner funding path), decline, decided once, limits, hostile input.

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService({ env: { TOPUP_REQUESTS_PER_DAY: '6', TOPUP_REQUESTS_OPEN_MAX: '3' } });
});
afterAll(async () => {
  await svc.close();
});

async function messages(bot: { auth: Record<string, string> }) {
  const res = await svc.app.inject({ url: '/api/v1/bot/messages?limit=200', headers: bot.auth });
  expect(res.statusCode).toBe(200);
  return res.json().messages as Array<{ event: string; data: Record<string, unknown> }>;
}

async function auditActions(botId: string) {
  const rows = await svc.ctx.db.query<{ action: string; details: Record<string, unknown> }>(
    'SELECT action, details FROM audit_log WHERE bot_id = $1 ORDER BY id',
    [botId],
  );
  return rows;
}

describe('asking', () => {
  it('a claimed bot asks; it lists the request; status and wallet check count it; the owner sees it', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 500 });
    expect(await pendingTopups(svc, bot)).toEqual({ check: 0, status: 0 });
    const res = await ask(svc, bot, { amount_cents: 2500, reason: 'API credits for the week' });
    expect(res.statusCode, res.body).toBe(201);
    const body = res.json();
    expect(body).toMatchObject({
      status: 'pending',
      amount_usd: 25,
      reason: 'API credits for the week',
      decided_at: null,
    });
    expect(body.topup_id).toMatch(/^topup_[a-z2-7]{16}$/);
    expect(new Date(body.expires_at).getTime() - new Date(body.created_at).getTime()).toBe(TOPUP_TTL_MS);
    expect(await pendingTopups(svc, bot)).toEqual({ check: 1, status: 1 });

    const list = await listForBot(svc, bot);
    expect(list.statusCode).toBe(200);
    expect(list.json().topup_requests).toEqual([
      expect.objectContaining({ topup_id: body.topup_id, status: 'pending', amount_usd: 25 }),
    ]);
    const requested = (await messages(bot)).filter((m) => m.event === 'wallet.topup_requested');
    expect(requested).toHaveLength(1);
    expect(requested[0]!.data).toMatchObject({ topup_id: body.topup_id, amount: 25 });

    const ownerList = await svc.app.inject({ url: '/api/v1/owner/topup-requests', headers: owner.auth });
    expect(ownerList.statusCode).toBe(200);
    expect(ownerList.json().topup_requests).toEqual([
      expect.objectContaining({
        topup_id: body.topup_id,
        bot_id: bot.bot_id,
        status: 'pending',
        amount_usd: 25,
        reason: 'API credits for the week',
      }),
    ]);
  });

  it('the same amount and reason while that request is open returns it (200), not a second one', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const first = await ask(svc, bot, { amount_cents: 1000, reason: 'hosting' });
    const again = await ask(svc, bot, { amount_cents: 1000, reason: '  hosting ' });
    expect(first.statusCode).toBe(201);
    expect(again.statusCode).toBe(200);
    expect(again.json().topup_id).toBe(first.json().topup_id);
    const other = await ask(svc, bot, { amount_cents: 1001, reason: 'hosting' });
    expect(other.statusCode).toBe(201);
    expect(await pendingTopups(svc, bot)).toEqual({ check: 2, status: 2 });
  });

  it('a bot nobody claimed yet, or whose wallet is frozen, may not ask (403), and nothing is stored', async () => {
    const pending = await registerBot(svc);
    const res = await ask(
      svc,
      { auth: { authorization: `Bearer ${pending.api_key}` } },
      {
        amount_cents: 100,
        reason: 'please',
      },
    );
    expect(res.statusCode).toBe(403);
    expect(res.json().error).toBe('wallet_not_active');

    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
      headers: owner.auth,
    });
    const frozen = await ask(svc, bot, { amount_cents: 100, reason: 'please' });
    expect(frozen.statusCode).toBe(403);
    expect(frozen.json().error).toBe('wallet_frozen');
    const rows = await svc.ctx.db.query('SELECT id FROM topup_requests WHERE bot_id IN ($1, $2)', [
      pending.bot_id,
      bot.bot_id,
    ]);
    expect(rows).toHaveLength(0);
  });
});

describe('listing', () => {
  it('the bot pages its requests newest first with limit and before; bad paging is 400', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      ids.push((await ask(svc, bot, { amount_cents: 100 + i, reason: `page ${i}` })).json().topup_id);
      svc.clock.advance(1000);
    }
    const first = await svc.app.inject({
      url: '/api/v1/bot/wallet/topup-requests?limit=2',
      headers: bot.auth,
    });
    const page1 = first.json().topup_requests as Array<{ topup_id: string; created_at: string }>;
    expect(page1.map((r) => r.topup_id)).toEqual([ids[2], ids[1]]);
    const next = await svc.app.inject({
      url: `/api/v1/bot/wallet/topup-requests?before=${encodeURIComponent(page1[1]!.created_at)}`,
      headers: bot.auth,
    });
    expect(next.json().topup_requests.map((r: { topup_id: string }) => r.topup_id)).toEqual([ids[0]]);
    for (const q of ['limit=abc', 'limit=-1', 'before=yesterday', 'limit=1&x=1']) {
      const bad = await svc.app.inject({ url: `/api/v1/bot/wallet/topup-requests?${q}`, headers: bot.auth });
      expect([200, 400], q).toContain(bad.statusCode);
      if (q !== 'limit=1&x=1') expect(bad.statusCode, q).toBe(400);
    }
    const owned = await svc.app.inject({
      url: '/api/v1/owner/topup-requests?status=all&limit=1',
      headers: owner.auth,
    });
    expect(owned.json().topup_requests.map((r: { topup_id: string }) => r.topup_id)).toEqual([ids[2]]);
    const badStatus = await svc.app.inject({
      url: '/api/v1/owner/topup-requests?status=open',
      headers: owner.auth,
    });
    expect(badStatus.statusCode).toBe(400);
  });
});

describe('deciding', () => {
  it('approve funds the wallet with the asked amount, balanced ledger, events to the bot, audit; once', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 500 });
    const asked = (await ask(svc, bot, { amount_cents: 1234, reason: 'more tokens' })).json();
    const res = await decide(svc, owner, asked.topup_id, 'approve');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({
      topup_id: asked.topup_id,
      status: 'approved',
      amount_usd: 12.34,
      approved_amount_usd: 12.34,
      balance_usd: 17.34,
    });
    const w = await expectLedgerConsistent(svc, bot.bot_id);
    expect(w.available_micros).toBe(1734 * 10_000);
    expect(w.owner_funding).toBe(-1734 * 10_000);

    const seen = await messages(bot);
    const funded = seen.filter(
      (m) => m.event === 'wallet.funded' && m.data.funding_id === res.json().funding_id,
    );
    expect(funded).toHaveLength(1);
    expect(funded[0]!.data).toMatchObject({ amount: 12.34, balance: 17.34 });
    const approved = seen.filter((m) => m.event === 'wallet.topup_approved');
    expect(approved).toHaveLength(1);
    expect(approved[0]!.data).toMatchObject({
      topup_id: asked.topup_id,
      amount: 12.34,
      approved_amount: 12.34,
      funding_id: res.json().funding_id,
    });
    const actions = (await auditActions(bot.bot_id)).map((a) => a.action);
    expect(actions.slice(-2)).toEqual(['wallet.funded', 'topup.approved']);

    const list = (await listForBot(svc, bot)).json().topup_requests;
    expect(list[0]).toMatchObject({ status: 'approved', approved_amount_usd: 12.34 });
    expect(await pendingTopups(svc, bot)).toEqual({ check: 0, status: 0 });

    for (const again of ['approve', 'decline'] as const) {
      const twice = await decide(svc, owner, asked.topup_id, again);
      expect(twice.statusCode).toBe(409);
      expect(twice.json()).toMatchObject({ error: 'not_pending', status: 'approved' });
    }
    expect((await wallet(svc, bot.bot_id)).available_micros).toBe(1734 * 10_000);
  });

  it('the owner may approve a different amount', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const asked = (await ask(svc, bot, { amount_cents: 5000, reason: 'a lot' })).json();
    const res = await decide(svc, owner, asked.topup_id, 'approve', { amount_cents: 2000 });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ amount_usd: 50, approved_amount_usd: 20 });
    expect((await wallet(svc, bot.bot_id)).available_micros).toBe(2000 * 10_000);
    for (const bad of [{ amount_cents: 0 }, { amount_cents: 1.5 }, { amount_cents: '10' }, { extra: 1 }]) {
      const other = (await ask(svc, bot, { amount_cents: 100, reason: `r${JSON.stringify(bad)}` })).json();
      const refused = await decide(svc, owner, other.topup_id, 'approve', bad);
      expect(refused.statusCode, JSON.stringify(bad)).toBe(400);
    }
  });

  it('decline with a note: the bot is told, the wallet is unchanged; decided once', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 300 });
    const asked = (await ask(svc, bot, { amount_cents: 700, reason: 'snacks' })).json();
    const res = await decide(svc, owner, asked.topup_id, 'decline', { note: 'Not this\nweek\u0007' });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ status: 'declined', note: 'Not this week' });
    expect((await wallet(svc, bot.bot_id)).available_micros).toBe(300 * 10_000);
    const declined = (await messages(bot)).filter((m) => m.event === 'wallet.topup_declined');
    expect(declined).toHaveLength(1);
    expect(declined[0]!.data).toMatchObject({ topup_id: asked.topup_id, note: 'Not this week' });
    expect((await listForBot(svc, bot)).json().topup_requests[0]).toMatchObject({
      status: 'declined',
      note: 'Not this week',
    });
    expect((await auditActions(bot.bot_id)).at(-1)!.action).toBe('topup.declined');
    const twice = await decide(svc, owner, asked.topup_id, 'approve');
    expect(twice.statusCode).toBe(409);
    expect(twice.json()).toMatchObject({ error: 'not_pending', status: 'declined' });
    expect((await wallet(svc, bot.bot_id)).available_micros).toBe(300 * 10_000);
    // No note at all is fine too.
    const other = (await ask(svc, bot, { amount_cents: 800, reason: 'snacks' })).json();
    expect((await decide(svc, owner, other.topup_id, 'decline')).statusCode).toBe(200);
  });

  it('an unanswered request expires: not open any more, decisions refused, the bot is told once', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const asked = (await ask(svc, bot, { amount_cents: 900, reason: 'later' })).json();
    svc.clock.advance(TOPUP_TTL_MS + 1000);
    try {
      expect(await pendingTopups(svc, bot)).toEqual({ check: 0, status: 0 });
      expect((await listForBot(svc, bot)).json().topup_requests[0].status).toBe('expired');
      const late = await decide(svc, owner, asked.topup_id, 'approve');
      expect(late.statusCode).toBe(409);
      expect(late.json()).toMatchObject({ error: 'not_pending', status: 'expired' });
      const status = async (id: string) =>
        (
          await svc.ctx.db.query<{ status: string }>('SELECT status FROM topup_requests WHERE id = $1', [id])
        )[0]!.status;
      expect(await status(asked.topup_id)).toBe('expired'); // the late decision wrote the expiry
      const another = (await ask(svc, bot, { amount_cents: 901, reason: 'later' })).json();
      svc.clock.advance(TOPUP_TTL_MS + 1000);
      expect(await expireDueTopups(svc.ctx)).toBeGreaterThanOrEqual(1);
      expect(await status(another.topup_id)).toBe('expired');
      expect(await expireDueTopups(svc.ctx)).toBe(0);
      const expired = (await messages(bot)).filter((m) => m.event === 'wallet.topup_expired');
      expect(expired.map((m) => m.data.topup_id)).toEqual([asked.topup_id, another.topup_id]);
      expect((await wallet(svc, bot.bot_id)).available_micros).toBe(0);
    } finally {
      // The shared clock moved two weeks: later tests are unaffected (they use fresh bots).
    }
  });

  it('with a decoy reserve, an approved top-up raises what the bot sees by exactly the amount it asked', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 5000 });
    const card = await setupCard(svc, owner, bot.bot_id, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 10_000,
    });
    const decoy = await checkout(svc, bot, purchase(card.decoyIndex, 300));
    expect(decoy.statusCode, decoy.body).toBe(200);
    const before = await wallet(svc, bot.bot_id);
    expect(Number(before.decoy_spent_micros)).toBe(300 * 10_000);
    const seenBefore = (await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth })).json()
      .balance_usd as number;
    const asked = (await ask(svc, bot, { amount_cents: 1000, reason: 'top me up' })).json();
    const approved = await decide(svc, owner, asked.topup_id, 'approve');
    expect(approved.statusCode).toBe(200);
    const after = await expectLedgerConsistent(svc, bot.bot_id);
    expect(Number(after.decoy_spent_micros)).toBe(300 * 10_000);
    const seenAfter = (await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth })).json()
      .balance_usd as number;
    expect(Math.round((seenAfter - seenBefore) * 100)).toBe(1000);
    const funded = (await events(svc, bot.bot_id, 'wallet.funded')).find(
      (e) => e.data.funding_id === approved.json().funding_id,
    )!;
    expect(funded.data.amount).toBe(10);
  });
});

describe('atomicity', () => {
  it('a failure late in the approval (the event insert) rolls back the funding, the ledger and the decision', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 100 });
    const asked = (await ask(svc, bot, { amount_cents: 2000, reason: 'atomic' })).json();
    // A fault injected in the database: the last write of the approval fails.
    await svc.ctx.db.query(`CREATE FUNCTION fail_topup_event() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.type = 'wallet.topup_approved' THEN RAISE EXCEPTION 'injected fault'; END IF; RETURN NEW; END $$`);
    await svc.ctx.db.query(
      'CREATE TRIGGER fail_topup_event BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION fail_topup_event()',
    );
    try {
      const failed = await decide(svc, owner, asked.topup_id, 'approve');
      expect(failed.statusCode).toBe(500);
    } finally {
      await svc.ctx.db.query('DROP TRIGGER fail_topup_event ON events');
      await svc.ctx.db.query('DROP FUNCTION fail_topup_event()');
    }
    expect((await wallet(svc, bot.bot_id)).available_micros).toBe(100 * 10_000);
    await expectLedgerConsistent(svc, bot.bot_id);
    expect(await events(svc, bot.bot_id, 'wallet.funded')).toHaveLength(1); // the initial funding only
    expect((await auditActions(bot.bot_id)).filter((a) => a.action.startsWith('topup.'))).toEqual([]);
    expect((await listForBot(svc, bot)).json().topup_requests[0].status).toBe('pending');
    // Nothing half-done is left behind: the approval goes through once the fault is gone.
    expect((await decide(svc, owner, asked.topup_id, 'approve')).statusCode).toBe(200);
    expect((await wallet(svc, bot.bot_id)).available_micros).toBe(2100 * 10_000);
  });
});

describe('isolation', () => {
  it("another owner's request is 404 on approve and decline, and nothing changes; the bot lists only its own", async () => {
    const owner = await createOwner(svc);
    const attacker = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const attackerBot = await activeBot(svc, attacker);
    const asked = (await ask(svc, bot, { amount_cents: 4200, reason: 'mine' })).json();
    for (const d of ['approve', 'decline'] as const) {
      const res = await decide(svc, attacker, asked.topup_id, d);
      expect(res.statusCode).toBe(404);
      expect(res.json().error).toBe('not_found');
    }
    const unknown = await decide(svc, owner, 'topup_aaaaaaaaaaaaaaaa', 'approve');
    expect(unknown.statusCode).toBe(404);
    const malformed = await decide(svc, owner, 'chk_aaaaaaaaaaaaaaaa', 'approve');
    expect(malformed.statusCode).toBe(400);
    const attackerList = await svc.app.inject({
      url: '/api/v1/owner/topup-requests?status=all',
      headers: attacker.auth,
    });
    expect(attackerList.json().topup_requests).toEqual([]);
    expect((await listForBot(svc, attackerBot)).json().topup_requests).toEqual([]);
    expect((await wallet(svc, bot.bot_id)).available_micros).toBe(0);
    expect(await pendingTopups(svc, bot)).toEqual({ check: 1, status: 1 });
    // A bot cannot decide its own request: owner routes do not take bot keys.
    const self = await decide(svc, bot, asked.topup_id, 'approve');
    expect(self.statusCode).toBe(401);
  });
});

describe('hostile input', () => {
  it('bad amounts, reasons and fields are 400 validation_error and store nothing', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const bad: unknown[] = [
      { amount_cents: 0, reason: 'x' },
      { amount_cents: -100, reason: 'x' },
      { amount_cents: 10.5, reason: 'x' },
      { amount_cents: '1000', reason: 'x' },
      { amount_cents: 1_000_001, reason: 'x' },
      { amount_cents: 1e308, reason: 'x' },
      { amount_cents: null, reason: 'x' },
      { amount_cents: 100 },
      { reason: 'x' },
      { amount_cents: 100, reason: '' },
      { amount_cents: 100, reason: ' \n\t ' },
      { amount_cents: 100, reason: 'nul\u0000byte' },
      { amount_cents: 100, reason: 'lone \ud800 surrogate' },
      { amount_cents: 100, reason: 'x'.repeat(501) },
      { amount_cents: 100, reason: 'x'.repeat(100_000) },
      { amount_cents: 100, reason: 'x', amount_usd: 1 },
      { amount_cents: 100, reason: 'x', bot_id: 'bot_aaaaaaaaaaaaaaaa' },
      { amount_cents: 100, reason: ['x'] },
      [],
      'x',
    ];
    for (const body of bad) {
      const res = await ask(svc, bot, body);
      expect([400, 413, 415], JSON.stringify(body).slice(0, 80)).toContain(res.statusCode);
      if (res.statusCode === 400) expect(res.json().error).toBe('validation_error');
    }
    const rows = await svc.ctx.db.query('SELECT id FROM topup_requests WHERE bot_id = $1', [bot.bot_id]);
    expect(rows).toHaveLength(0);
  });

  it('control characters in the reason become spaces (no lines added to the owner mail)', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const res = await ask(svc, bot, {
      amount_cents: 100,
      reason: 'need funds\r\nBcc: victim@example.com\u2028Subject: hi',
    });
    expect(res.statusCode).toBe(201);
    expect(res.json().reason).toBe('need funds Bcc: victim@example.com Subject: hi');
  });
});

describe('limits', () => {
  it('at most TOPUP_REQUESTS_OPEN_MAX open at once, then 429 with Retry-After until the oldest expires', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await ask(svc, bot, { amount_cents: 100 + i, reason: `open ${i}` });
      expect(res.statusCode).toBe(201);
      ids.push(res.json().topup_id);
    }
    const fourth = await ask(svc, bot, { amount_cents: 200, reason: 'one too many' });
    expect(fourth.statusCode).toBe(429);
    expect(fourth.json()).toMatchObject({ error: 'rate_limited' });
    const retry = fourth.json().retry_after_seconds as number;
    expect(fourth.headers['retry-after']).toBe(String(retry));
    expect(retry).toBe(TOPUP_TTL_MS / 1000);
    // Deciding one frees a place.
    expect((await decide(svc, owner, ids[0]!, 'decline')).statusCode).toBe(200);
    expect((await ask(svc, bot, { amount_cents: 200, reason: 'now it fits' })).statusCode).toBe(201);
  });

  it('at most TOPUP_REQUESTS_PER_DAY asks a rolling day, refused ones included', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    // Six asks a day here: three created, then open-limit refusals, which count too.
    const codes: number[] = [];
    for (let i = 0; i < 6; i++)
      codes.push((await ask(svc, bot, { amount_cents: 100 + i, reason: `ask ${i}` })).statusCode);
    expect(codes).toEqual([201, 201, 201, 429, 429, 429]);
    const ids = (await listForBot(svc, bot))
      .json()
      .topup_requests.map((r: { topup_id: string }) => r.topup_id);
    for (const id of ids) await decide(svc, owner, id, 'decline');
    const refused = await ask(svc, bot, { amount_cents: 999, reason: 'day is full' });
    expect(refused.statusCode).toBe(429);
    expect(refused.json().message).toMatch(/a day/);
    const retry = refused.json().retry_after_seconds as number;
    expect(retry).toBeGreaterThan(86_000);
    expect(refused.headers['retry-after']).toBe(String(retry));
    svc.clock.advance(86_400_000);
    expect((await ask(svc, bot, { amount_cents: 999, reason: 'next day' })).statusCode).toBe(201);
  });
});

describe('wiring', () => {
  it('documents every top-up route in /openapi.json with its security, and expires on the worker role', async () => {
    const doc = (await svc.app.inject({ url: '/openapi.json' })).json() as {
      paths: Record<string, Record<string, { security?: unknown }>>;
    };
    const routes: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      if (!path.startsWith('/api/') || !path.includes('topup')) continue;
      for (const [method, op] of Object.entries(ops)) {
        routes.push(`${method.toUpperCase()} ${path}`);
        expect(op.security, path).toEqual(
          path.startsWith('/api/v1/bot/') ? [{ botKey: [] }] : [{ ownerToken: [] }],
        );
      }
    }
    expect(routes.sort()).toEqual(
      [
        'GET /api/v1/bot/wallet/topup-requests',
        'GET /api/v1/owner/topup-requests',
        'POST /api/v1/bot/wallet/topup-requests',
        'POST /api/v1/owner/topup-requests/{topup_id}/approve',
        'POST /api/v1/owner/topup-requests/{topup_id}/decline',
      ].sort(),
    );
    expect(ALL_JOBS.find((j) => j.name === 'topup-expiry')?.role).toBe('worker');
  });
});
