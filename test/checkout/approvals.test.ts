import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listApprovals } from '../../src/checkout/decisions.ts';
import { processDueConfirmations } from '../../src/spend/holds.ts';
import { ownerMailSettled } from '../../src/notifications/job.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
  giveGenerousBudgets,
} from '../support/service.ts';
import { until } from '../support/wait.ts';
import {
  checkout,
  counter,
  DIGITS,
  events,
  expectLedgerConsistent,
  poll,
  purchase,
  setupCard,
  wallet,
} from './helpers.ts';

describe('checkout approvals: approve, deny, expire, poll', () => {
  let svc: TestService;
  let owner: TestOwner;
  beforeAll(async () => {
    svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
    owner = await createOwner(svc);
    // Most tests here are about other limits: give the shared owner generous master budgets.
    await giveGenerousBudgets(svc, owner);
  });
  afterAll(async () => {
    await svc.close();
  });

  async function held(fundCents = 1000, amount = 400, o = owner) {
    const bot = await activeBot(svc, o, { fundCents });
    const card = await setupCard(svc, o, bot.bot_id);
    const res = await checkout(svc, bot, purchase(card.real_profile_index, amount));
    expect(res.statusCode, res.body).toBe(202);
    const id = res.json().confirmation_id as string;
    // The checkout wakes the owner-mail job after its commit; that job claims the confirmation row
    // with FOR UPDATE SKIP LOCKED, and the expiry pass below skips a row it holds. Let the mail go
    // out first, so what the expiry pass finds never depends on the scheduler.
    await until(async () => {
      const [row] = await svc.ctx.db.query<{ sent: boolean }>(
        'SELECT owner_mailed_at IS NOT NULL AS sent FROM checkout_confirmations WHERE id = $1',
        [id],
      );
      return row?.sent === true;
    }, 10_000);
    return { bot, card, id };
  }

  function decide(id: string, decision: 'approve' | 'deny', o = owner) {
    return svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/approvals/${id}/${decision}`,
      headers: o.auth,
    });
  }

  it('approve captures the hold; the poll then returns the card details; a second decision is 409', async () => {
    const { bot, card, id } = await held();
    const list = await svc.app.inject({ url: '/api/v1/owner/approvals', headers: owner.auth });
    expect(list.json().approvals.map((a: { confirmation_id: string }) => a.confirmation_id)).toContain(id);
    // The response schemas are exact: the answer is all the service returns (nothing dropped).
    expect(list.json()).toEqual(JSON.parse(JSON.stringify(await listApprovals(svc.ctx, owner.id))));
    const detail = await svc.app.inject({ url: `/api/v1/owner/bots/${bot.bot_id}`, headers: owner.auth });
    expect(detail.json().pending_approvals).toBe(1);

    const pending = await poll(svc, bot, id);
    expect(pending.json()).toMatchObject({
      confirmation_id: id,
      status: 'pending',
      amount_usd: 4,
      item_name: 'A book',
    });
    expect(pending.json().missing_digits).toBeUndefined();

    const res = await decide(id, 'approve');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({
      confirmation_id: id,
      status: 'approved',
      bot_id: bot.bot_id,
      amount_usd: 4,
      merchant_name: 'Acme Books',
      decided_at: new Date(svc.clock.now()).toISOString(),
    });
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger).toMatchObject({
      available_micros: 600 * 10_000,
      held_micros: 0,
      merchant_settlement: 400 * 10_000,
    });
    expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(400 * 10_000);

    const approved = await poll(svc, bot, id);
    expect(approved.json()).toMatchObject({
      status: 'approved',
      missing_digits: DIGITS,
      expiry_month: '09',
      expiry_year: '2030',
      merchant_name: 'Acme Books',
    });
    const ev = await events(svc, bot.bot_id, 'purchase.approved');
    expect(ev).toHaveLength(1);
    expect(ev[0]!.data).toEqual({
      checkout_id: id,
      amount: 4,
      vendor: 'Acme Books',
      description: 'A book',
      status: 'approved',
    });

    for (const again of ['approve', 'deny'] as const) {
      const r = await decide(id, again);
      expect(r.statusCode).toBe(409);
      expect(r.json().error).toBe('not_pending');
    }
    const after = await svc.app.inject({ url: `/api/v1/owner/bots/${bot.bot_id}`, headers: owner.auth });
    expect(after.json().pending_approvals).toBe(0);
  });

  it('deny releases the hold and every counter; the poll says denied without card details', async () => {
    const { bot, card, id } = await held();
    const monthBefore = await counter(svc, `owner:${owner.id}`, 'month');
    const res = await decide(id, 'deny');
    expect(res.statusCode).toBe(200);
    expect(res.json().status).toBe('denied');
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger).toMatchObject({ available_micros: 1000 * 10_000, held_micros: 0, merchant_settlement: 0 });
    expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(0);
    expect(await counter(svc, `card:${card.card_id}`, 'week')).toBe(0);
    expect(await counter(svc, `bot:${bot.bot_id}`, 'month')).toBe(0);
    expect(await counter(svc, `owner:${owner.id}`, 'month')).toBe(monthBefore - 400 * 10_000);
    const p = await poll(svc, bot, id);
    expect(p.json()).toMatchObject({ status: 'denied' });
    expect(p.json().missing_digits).toBeUndefined();
    expect((await events(svc, bot.bot_id, 'purchase.denied'))[0]!.data).toMatchObject({
      checkout_id: id,
      amount: 4,
    });
    expect((await decide(id, 'approve')).statusCode).toBe(409);
  });

  it('the expiry job expires a confirmation when its window elapses, once, and releases the hold', async () => {
    const { bot, card, id } = await held();
    await ownerMailSettled(svc.ctx); // a row being marked mailed is passed over (SKIP LOCKED)
    svc.clock.advance(899_000);
    await processDueConfirmations(svc.ctx);
    expect((await poll(svc, bot, id)).json().status).toBe('pending');
    svc.clock.advance(1_000);
    expect(await processDueConfirmations(svc.ctx)).toBeGreaterThanOrEqual(1);
    expect(await processDueConfirmations(svc.ctx)).toBe(0);
    const p = await poll(svc, bot, id);
    expect(p.json()).toMatchObject({ status: 'expired' });
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger).toMatchObject({ available_micros: 1000 * 10_000, held_micros: 0 });
    expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(0);
    expect(await events(svc, bot.bot_id, 'purchase.expired')).toHaveLength(1);
    const late = await decide(id, 'approve');
    expect(late.statusCode).toBe(409);
    expect(late.json()).toMatchObject({ error: 'not_pending', status: 'expired' });
  });

  it('a decision after the window but before the job runs is refused and expires the confirmation', async () => {
    const { bot, id } = await held();
    svc.clock.advance(900_000);
    const late = await decide(id, 'approve');
    expect(late.statusCode).toBe(409);
    expect((await poll(svc, bot, id)).json().status).toBe('expired');
    expect(await events(svc, bot.bot_id, 'purchase.expired')).toHaveLength(1);
    await expectLedgerConsistent(svc, bot.bot_id);
    expect((await wallet(svc, bot.bot_id)).held_micros).toBe(0);
  });

  it('a poll settles a due confirmation itself', async () => {
    const { bot, id } = await held();
    svc.clock.advance(900_001);
    expect((await poll(svc, bot, id)).json().status).toBe('expired');
    expect(await processDueConfirmations(svc.ctx)).toBe(0);
    expect((await wallet(svc, bot.bot_id)).held_micros).toBe(0);
  });

  it('poll: 400 without confirmation_id, 404 for unknown or another bot, 401 without a key', async () => {
    const { bot, id } = await held();
    const other = await activeBot(svc, owner, { fundCents: 100 });
    expect((await poll(svc, other, id)).statusCode).toBe(404);
    expect((await poll(svc, bot, 'chk_unknownunknown')).statusCode).toBe(404);
    const missing = await svc.app.inject({ url: '/api/v1/bot/merchant/checkout/status', headers: bot.auth });
    expect(missing.statusCode).toBe(400);
    expect(missing.json().error).toBe('validation_error');
    const anon = await svc.app.inject({ url: `/api/v1/bot/merchant/checkout/status?confirmation_id=${id}` });
    expect(anon.statusCode).toBe(401);
  });

  it("owner routes: 401 without a token; another owner's confirmation is 404 and not listed", async () => {
    const { id } = await held();
    const stranger = await createOwner(svc);
    expect((await decide(id, 'approve', stranger)).statusCode).toBe(404);
    expect((await decide(id, 'deny', stranger)).statusCode).toBe(404);
    const list = await svc.app.inject({ url: '/api/v1/owner/approvals', headers: stranger.auth });
    expect(list.json().approvals).toEqual([]);
    const anon = await svc.app.inject({ method: 'POST', url: `/api/v1/owner/approvals/${id}/approve` });
    expect(anon.statusCode).toBe(401);
    expect((await svc.app.inject({ url: '/api/v1/owner/approvals' })).statusCode).toBe(401);
    const badId = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/owner/approvals/nope/approve',
      headers: owner.auth,
    });
    expect(badId.statusCode).toBe(400);
  });

  it('a held purchase on a decoy goes to the owner like the real one: inbox, mail, decision; approving it moves no money', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id);
    const ids: Record<'approve' | 'deny' | 'expire', string> = { approve: '', deny: '', expire: '' };
    for (const key of ['approve', 'deny', 'expire'] as const) {
      const res = await checkout(svc, bot, purchase(card.decoyIndex, 100));
      expect(res.statusCode, res.body).toBe(202);
      ids[key] = res.json().confirmation_id;
    }
    await ownerMailSettled(svc.ctx);
    const list = (await svc.app.inject({ url: '/api/v1/owner/approvals', headers: owner.auth })).json();
    for (const id of Object.values(ids)) {
      const item = list.approvals.find((a: { confirmation_id: string }) => a.confirmation_id === id);
      // The purchase, never its profile.
      expect(item).toMatchObject({ rail: 'card_wallet', card_id: card.card_id, amount_usd: 1 });
      expect(Object.keys(item).join()).not.toMatch(/profile|real|decoy/);
      // The same mail as a real hold.
      expect(
        svc.mailer.sent.filter((m) => m.text.includes('Approve:') && m.subject.includes('$1.00')),
      ).not.toHaveLength(0);
    }
    expect((await decide(ids.approve, 'approve')).statusCode).toBe(200);
    expect((await decide(ids.deny, 'deny')).statusCode).toBe(200);
    svc.clock.advance(900_001);
    await processDueConfirmations(svc.ctx);
    expect((await poll(svc, bot, ids.approve)).json()).toMatchObject({ status: 'approved' });
    expect((await poll(svc, bot, ids.approve)).json().missing_digits).toMatch(/^\d{3}$/);
    expect((await poll(svc, bot, ids.deny)).json().status).toBe('denied');
    expect((await poll(svc, bot, ids.expire)).json().status).toBe('expired');
    // No money moved: the wallet keeps its $10; the approved decoy keeps counting in the decoy's
    // allowance and lowers the visible balance, as a real purchase would.
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger).toMatchObject({ available_micros: 1000 * 10_000, held_micros: 0, merchant_settlement: 0 });
    const check = (await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth })).json();
    expect(check.balance_usd).toBe(9);
    expect(await counter(svc, `card:${card.card_id}:p${card.decoyIndex}`, 'week')).toBe(100 * 10_000);
    const decided = (await events(svc, bot.bot_id)).filter((e) => e.event.startsWith('purchase.'));
    expect(decided.map((e) => e.event).sort()).toEqual([
      'purchase.approved',
      'purchase.denied',
      'purchase.expired',
    ]);
  });

  it('the owner sees a burst: a bot that asks for several purchases within minutes is named in the inbox', async () => {
    const o = await createOwner(svc);
    await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: o.auth,
      payload: {
        per_transaction_cents: 100_000,
        daily_budget_cents: 1_000_000,
        monthly_budget_cents: 10_000_000,
      },
    });
    const bot = await activeBot(svc, o, { fundCents: 10_000 });
    const card = await setupCard(svc, o, bot.bot_id);
    const quiet = (await svc.app.inject({ url: '/api/v1/owner/approvals', headers: o.auth })).json();
    expect(quiet.bursts).toEqual([]);
    for (let p = 1; p <= 6; p++) {
      const res = await checkout(svc, bot, purchase(p, 100 + p));
      expect(res.statusCode, res.body).toBe(202);
      svc.clock.advance(10_000);
    }
    const list = (await svc.app.inject({ url: '/api/v1/owner/approvals', headers: o.auth })).json();
    expect(list.bursts).toEqual([expect.objectContaining({ bot_id: bot.bot_id, pending_purchases: 6 })]);
    await ownerMailSettled(svc.ctx);
    // The sixth purchase's mail (each held purchase starts its own send right after its commit, so
    // on a loaded machine the fifth's can finish last).
    const sixth = svc.mailer.sent.filter((m) => m.to === o.email && m.text.includes('$1.06'));
    expect(sixth).toHaveLength(1);
    expect(sixth[0]?.text).toContain('has asked for 6 purchases in 10 minutes');
    expect(card.card_id).toMatch(/^card_/);
  });

  it('parallel approve and deny decide once', async () => {
    const { bot, id } = await held();
    const [a, d] = await Promise.all([decide(id, 'approve'), decide(id, 'deny')]);
    expect([a.statusCode, d.statusCode].sort()).toEqual([200, 409]);
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger.held_micros).toBe(0);
    const ev = (await events(svc, bot.bot_id)).filter(
      (e) => e.event === 'purchase.approved' || e.event === 'purchase.denied',
    );
    expect(ev).toHaveLength(1);
  });

  it('wallet.balance_low when a purchase takes the balance below $5, once per crossing', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 800 });
    const card = await setupCard(svc, owner, bot.bot_id, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 10_000,
    });
    await checkout(svc, bot, purchase(card.real_profile_index, 200));
    expect(await events(svc, bot.bot_id, 'wallet.balance_low')).toHaveLength(0);
    await checkout(svc, bot, purchase(card.real_profile_index, 200));
    const low = await events(svc, bot.bot_id, 'wallet.balance_low');
    expect(low).toHaveLength(1);
    expect(low[0]!.data).toMatchObject({ balance: 4 });
    await checkout(svc, bot, purchase(card.real_profile_index, 100));
    expect(await events(svc, bot.bot_id, 'wallet.balance_low')).toHaveLength(1);
    // Decoys never move the balance, so they never emit it.
    await checkout(svc, bot, purchase(card.decoyIndex, 300));
    expect(await events(svc, bot.bot_id, 'wallet.balance_low')).toHaveLength(1);
  });

  it('bot status counts a held purchase in monthly_spent and gives it back on release', async () => {
    const { bot, id } = await held();
    const during = await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth });
    expect(during.json()).toMatchObject({ balance_usd: 6, spending_limits: { monthly_spent_usd: 4 } });
    await decide(id, 'deny');
    const after = await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth });
    expect(after.json()).toMatchObject({ balance_usd: 10, spending_limits: { monthly_spent_usd: 0 } });
  });
});
