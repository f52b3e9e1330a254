import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLuhnValid } from '../../src/cards/decoys.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  registerBot,
  type TestOwner,
  type TestService,
  giveGenerousBudgets,
} from '../support/service.ts';
import {
  checkout,
  counter,
  DIGITS,
  events,
  expectLedgerConsistent,
  patchCard,
  purchase,
  putProfile,
  setupCard,
  wallet,
} from './helpers.ts';

const AUTO = { approval_mode: 'auto_approve_under_threshold', approval_threshold_cents: 100_000 };

describe('checkout: the guardrail chain', () => {
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

  async function confirmations(botId: string) {
    const rows = await svc.ctx.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM checkout_confirmations WHERE bot_id = $1',
      [botId],
    );
    return rows[0]!.n;
  }

  it('approves a real purchase at once: 200 with the real digits, wallet debited, counters and event', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 2000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    const res = await checkout(svc, bot, purchase(card.real_profile_index, 250));
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(
      [
        'approved',
        'missing_digits',
        'expiry_month',
        'expiry_year',
        'confirmation_id',
        'profile_index',
        'merchant_name',
        'amount_usd',
        'message',
      ].sort(),
    );
    expect(body).toMatchObject({
      approved: true,
      missing_digits: DIGITS,
      expiry_month: '09',
      expiry_year: '2030',
      profile_index: card.real_profile_index,
      merchant_name: 'Acme Books',
      amount_usd: 2.5,
    });
    expect(body.confirmation_id).toMatch(/^chk_[a-z2-7]+$/);
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger.available_micros).toBe(1750 * 10_000);
    expect(ledger.merchant_settlement).toBe(250 * 10_000);
    expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(250 * 10_000);
    expect(await counter(svc, `owner:${owner.id}`, 'month')).toBe(250 * 10_000);
    expect(await counter(svc, `bot:${bot.bot_id}`, 'month')).toBe(250 * 10_000);
    // Exactly the windows a limit or a figure reads: card day and month, the profile's allowance
    // window (in the same row: migration 0059), the owner's day and month, the bot's month (its day
    // was counted and read nowhere).
    const windows = await svc.ctx.db.query<{ w: string }>(
      `SELECT s.scope || ' ' || k.kind AS w
         FROM spend_windows s
         CROSS JOIN LATERAL (VALUES ('day', s.day_start), ('week', s.week_start), ('month', s.month_start)) k(kind, start)
        WHERE k.start IS NOT NULL
          AND (s.scope LIKE '%' || $1 || '%' OR s.scope LIKE '%' || $2 || '%' OR s.scope LIKE '%' || $3 || '%')
        ORDER BY 1`,
      [card.card_id, owner.id, bot.bot_id],
    );
    expect(windows.map((r) => r.w.replace(card.card_id, '<card>').replace(bot.bot_id, '<bot>'))).toEqual(
      [
        `bot:<bot> month`,
        `card:<card> day`,
        `card:<card> month`,
        `card:<card> week`,
        `owner:${owner.id} day`,
        `owner:${owner.id} month`,
      ].sort(),
    );
    const approved = await events(svc, bot.bot_id, 'purchase.approved');
    expect(approved).toHaveLength(1);
    expect(approved[0]!.data).toMatchObject({
      checkout_id: body.confirmation_id,
      amount: 2.5,
      vendor: 'Acme Books',
      description: 'A book',
    });
    // Status shows the real spending.
    const status = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    expect(status.json().rails.card_wallet.spending_limits.monthly_spent_usd).toBe(2.5);
    // No card digits in any event or log line.
    const all = await svc.ctx.db.query<{ body: string }>('SELECT body FROM events');
    for (const e of all) expect(e.body).not.toContain('missing_digits');
    expect(svc.logs()).not.toContain(`"missing_digits":"${DIGITS}"`);
  });

  it('answers a decoy exactly like the real profile: same fields, and the same figures move, but no money', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 2000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    const ownerBefore = await counter(svc, `owner:${owner.id}`, 'month');
    const a = await checkout(svc, bot, purchase(card.decoyIndex, 300));
    const b = await checkout(svc, bot, purchase(card.decoyIndex, 100));
    expect(a.statusCode).toBe(200);
    expect(b.statusCode).toBe(200);
    const real = await checkout(svc, bot, purchase(card.real_profile_index, 100));
    expect(Object.keys(a.json()).sort()).toEqual(Object.keys(real.json()).sort());
    expect(a.json().message).toBe(real.json().message);
    expect(a.json().missing_digits).toMatch(/^\d{3}$/);
    expect(a.json().expiry_month).toMatch(/^(0[1-9]|1[0-2])$/);
    // The same year as the real card's; stable per profile.
    expect(a.json().expiry_year).toBe(real.json().expiry_year);
    expect(b.json().missing_digits).toBe(a.json().missing_digits);
    expect(b.json().expiry_month).toBe(a.json().expiry_month);
    // Each profile's digits complete its own number in the bot's file to a Luhn-valid one.
    for (const [index, res] of [
      [card.decoyIndex, a],
      [card.real_profile_index, real],
    ] as const) {
      const profile = card.file.profiles.find((p) => p.profile_index === index)!;
      expect(isLuhnValid(profile.card_number.replace('***', res.json().missing_digits))).toBe(true);
    }
    // Money: only the real 100 left the wallet; the bot's balance and counter show all 500.
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger.available_micros).toBe(1900 * 10_000);
    const status = (await svc.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth })).json();
    expect(status.balance_usd).toBe(15);
    expect(status.spending_limits.monthly_spent_usd).toBe(5);
    expect(await counter(svc, `owner:${owner.id}`, 'month')).toBe(ownerBefore + 100 * 10_000);
    expect(await counter(svc, `bot:${bot.bot_id}`, 'month')).toBe(500 * 10_000);
    expect(await counter(svc, `card:${card.card_id}:p${card.decoyIndex}`, 'week')).toBe(400 * 10_000);
    expect(await events(svc, bot.bot_id, 'purchase.approved')).toHaveLength(3);
  });

  it('400 validation_error for bad bodies and changes nothing', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    const p = card.real_profile_index;
    const bad: Array<Record<string, unknown>> = [
      purchase(1.5, 100),
      { ...purchase(p, 100), currency: 'JPY' },
      { ...purchase(p, 100), profile_index: '1' },
      purchase(p, 0),
      purchase(p, 10_000_001),
      purchase(p, 1.5),
      { ...purchase(p, 100), amount_cents: '100' },
      purchase(p, 100, { merchant_name: '' }),
      purchase(p, 100, { merchant_name: 'x'.repeat(201) }),
      purchase(p, 100, { merchant_url: 'x'.repeat(2001) }),
      purchase(p, 100, { item_name: 'x'.repeat(501) }),
      purchase(p, 100, { category: 'x'.repeat(101) }),
      purchase(p, 100, { task_id: 'x'.repeat(101) }),
      { merchant_name: 'a', merchant_url: 'b', item_name: 'c', amount_cents: 1 },
    ];
    for (const body of bad) {
      const res = await checkout(svc, bot, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json().error).toBe('validation_error');
    }
    const notJson = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bot/merchant/checkout',
      headers: { ...bot.auth, 'content-type': 'application/json' },
      payload: '{nope',
    });
    expect(notJson.statusCode).toBe(400);
    expect(await confirmations(bot.bot_id)).toBe(0);
    expect((await wallet(svc, bot.bot_id)).available_micros).toBe(1000 * 10_000);
  });

  it('401 without a valid API key', async () => {
    const res = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bot/merchant/checkout',
      payload: purchase(1, 100),
    });
    expect(res.statusCode).toBe(401);
    expect(res.json().error).toBe('Authentication required');
    const wrong = await checkout(
      svc,
      { auth: { authorization: `Bearer svc_live_${'0'.repeat(48)}` } },
      purchase(1, 1),
    );
    expect(wrong.statusCode).toBe(401);
  });

  it('403 wallet_not_active for an unclaimed bot and wallet_frozen for a frozen wallet', async () => {
    const pending = await registerBot(svc, { owner_email: owner.email });
    const res = await checkout(
      svc,
      { auth: { authorization: `Bearer ${pending.api_key}` } },
      purchase(1, 100),
    );
    expect(res.statusCode).toBe(403);
    expect(res.json().error).toBe('wallet_not_active');

    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
      headers: owner.auth,
    });
    const frozen = await checkout(svc, bot, purchase(card.real_profile_index, 100));
    expect(frozen.statusCode).toBe(403);
    expect(frozen.json().error).toBe('wallet_frozen');
    expect(await confirmations(bot.bot_id)).toBe(0);
  });

  it('card resolution: card_not_active, card_id_required, card_not_found', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const none = await checkout(svc, bot, purchase(1, 100));
    expect(none.statusCode).toBe(403);
    expect(none.json().error).toBe('card_not_active');

    const first = await setupCard(svc, owner, bot.bot_id, AUTO);
    const second = await setupCard(svc, owner, bot.bot_id, AUTO);
    const ambiguous = await checkout(svc, bot, purchase(1, 100));
    expect(ambiguous.statusCode).toBe(400);
    expect(ambiguous.json().error).toBe('card_id_required');
    const named = await checkout(
      svc,
      bot,
      purchase(second.real_profile_index, 100, { card_id: second.card_id }),
    );
    expect(named.statusCode, named.body).toBe(200);

    const unknown = await checkout(svc, bot, purchase(1, 100, { card_id: 'card_aaaaaaaaaaaaaaaa' }));
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error).toBe('card_not_found');
    const otherBot = await activeBot(svc, owner, { fundCents: 100 });
    const foreign = await setupCard(svc, owner, otherBot.bot_id, AUTO);
    const notMine = await checkout(svc, bot, purchase(1, 100, { card_id: foreign.card_id }));
    expect(notMine.statusCode).toBe(404);
    expect(notMine.json().error).toBe('card_not_found');

    await patchCard(svc, owner, bot.bot_id, first.card_id, { status: 'frozen' });
    const frozenCard = await checkout(svc, bot, purchase(1, 100, { card_id: first.card_id }));
    expect(frozenCard.statusCode).toBe(403);
    expect(frozenCard.json().error).toBe('card_not_active');
    // With one card frozen, the other is the only active one: no card_id needed.
    const single = await checkout(svc, bot, purchase(second.real_profile_index, 100));
    expect(single.statusCode).toBe(200);
  });

  it('400 invalid_profile for a disabled profile', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    await putProfile(svc, owner, bot.bot_id, card.card_id, card.decoyIndex, { enabled: false });
    const res = await checkout(svc, bot, purchase(card.decoyIndex, 100));
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toBe('invalid_profile');
  });

  it('card guardrails: per transaction, daily and monthly, with limit_usd and remaining_usd', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 10_000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    const p = card.decoyIndex; // decoys have no master budget, so only card limits apply
    const perTx = await checkout(svc, bot, purchase(p, 501));
    expect(perTx.statusCode).toBe(403);
    expect(perTx.json()).toMatchObject({
      error: 'card_guardrail_violation',
      limit: 'per_transaction',
      limit_usd: 5,
    });
    expect((await checkout(svc, bot, purchase(p, 500))).statusCode).toBe(200);
    expect((await checkout(svc, bot, purchase(p, 400))).statusCode).toBe(200);
    const daily = await checkout(svc, bot, purchase(p, 200));
    expect(daily.statusCode).toBe(403);
    expect(daily.json()).toMatchObject({
      error: 'card_guardrail_violation',
      limit: 'daily',
      limit_usd: 10,
      remaining_usd: 1,
    });
    await patchCard(svc, owner, bot.bot_id, card.card_id, { daily_cents: 100_000, monthly_cents: 1000 });
    const monthly = await checkout(svc, bot, purchase(p, 200));
    expect(monthly.json()).toMatchObject({
      error: 'card_guardrail_violation',
      limit: 'monthly',
      remaining_usd: 1,
    });
    // A refused request rolled back: the counters only hold the two approved purchases.
    expect(await counter(svc, `card:${card.card_id}:p${p}`, 'day')).toBe(900 * 10_000);
  });

  it('403 allowance_exceeded against the profile window', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 10_000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    await putProfile(svc, owner, bot.bot_id, card.card_id, card.real_profile_index, {
      allowance_cents: 300,
      allowance_window: 'day',
    });
    expect((await checkout(svc, bot, purchase(card.real_profile_index, 200))).statusCode).toBe(200);
    const res = await checkout(svc, bot, purchase(card.real_profile_index, 200));
    expect(res.statusCode).toBe(403);
    expect(res.json()).toMatchObject({
      error: 'allowance_exceeded',
      window: 'day',
      limit_usd: 3,
      remaining_usd: 1,
    });
    // The next UTC day opens a new window.
    svc.clock.advance(86_400_000);
    expect((await checkout(svc, bot, purchase(card.real_profile_index, 200))).statusCode).toBe(200);
  });

  it('allowance windows start at the ISO week (Monday) and the UTC month', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 10_000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    const p = card.decoyIndex;
    await putProfile(svc, owner, bot.bot_id, card.card_id, p, {
      allowance_cents: 300,
      allowance_window: 'week',
    });
    // Move to the next Monday 00:00 UTC, spend, then try again on Sunday 23:59 and on Monday.
    const now = new Date(svc.clock.now());
    const daysToMonday = (8 - now.getUTCDay()) % 7 || 7;
    const monday = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + daysToMonday);
    svc.clock.set(monday);
    expect((await checkout(svc, bot, purchase(p, 200))).statusCode).toBe(200);
    svc.clock.set(monday + 7 * 86_400_000 - 60_000);
    expect((await checkout(svc, bot, purchase(p, 200))).json().error).toBe('allowance_exceeded');
    svc.clock.set(monday + 7 * 86_400_000);
    expect((await checkout(svc, bot, purchase(p, 200))).statusCode).toBe(200);

    await putProfile(svc, owner, bot.bot_id, card.card_id, p, { allowance_window: 'month' });
    const t = new Date(svc.clock.now());
    const nextMonth = Date.UTC(t.getUTCFullYear(), t.getUTCMonth() + 1, 1);
    svc.clock.set(nextMonth);
    expect((await checkout(svc, bot, purchase(p, 300))).statusCode).toBe(200);
    svc.clock.set(nextMonth + 20 * 86_400_000);
    expect((await checkout(svc, bot, purchase(p, 100))).json()).toMatchObject({
      error: 'allowance_exceeded',
      window: 'month',
      remaining_usd: 0,
    });
  });

  it('a scope keeps its day and month in one row: a new day counts from zero, the month goes on, a new month too', async () => {
    const o = await createOwner(svc);
    await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: o.auth,
      payload: { per_transaction_cents: 1000, daily_budget_cents: 300, monthly_budget_cents: 500 },
    });
    const wide = { ...AUTO, per_transaction_cents: 1000, daily_cents: 100_000, monthly_cents: 100_000 };
    const realBot = await activeBot(svc, o, { fundCents: 10_000 });
    const real = await setupCard(svc, o, realBot.bot_id, wide);
    await putProfile(svc, o, realBot.bot_id, real.card_id, real.real_profile_index, {
      allowance_cents: 100_000,
    });
    // Owner limits on the real profile; card limits on a decoy profile of a bot of the shared owner
    // (generous master budgets: a decoy is checked against them in its own world).
    const decoyBot = await activeBot(svc, owner, { fundCents: 10_000 });
    const decoy = await setupCard(svc, owner, decoyBot.bot_id, {
      ...wide,
      daily_cents: 300,
      monthly_cents: 500,
    });
    await putProfile(svc, owner, decoyBot.bot_id, decoy.card_id, decoy.decoyIndex, {
      allowance_cents: 100_000,
    });
    const buy = (bot: typeof realBot, index: number) => checkout(svc, bot, purchase(index, 200));
    const both = async () => [
      await buy(realBot, real.real_profile_index),
      await buy(decoyBot, decoy.decoyIndex),
    ];
    const spending = async () => {
      const g = await svc.app.inject({ url: '/api/v1/owner/guardrails', headers: o.auth });
      const st = await svc.app.inject({ url: '/api/v1/bot/status', headers: realBot.auth });
      return {
        day: g.json().daily_spent_usd,
        month: g.json().monthly_spent_usd,
        bot: st.json().rails.card_wallet.spending_limits.monthly_spent_usd,
      };
    };
    const t = new Date(svc.clock.now());
    const day2 = Date.UTC(t.getUTCFullYear(), t.getUTCMonth() + 1, 2, 12);
    svc.clock.set(day2);
    for (const r of await both()) expect(r.json()).toMatchObject({ approved: true });
    const [masterDaily, cardDaily] = await both();
    expect(masterDaily!.json()).toMatchObject({
      error: 'master_budget_exceeded',
      limit: 'daily',
      remaining_usd: 1,
    });
    expect(cardDaily!.json()).toMatchObject({
      error: 'card_guardrail_violation',
      limit: 'daily',
      remaining_usd: 1,
    });
    svc.clock.set(day2 + 86_400_000);
    for (const r of await both()) expect(r.json()).toMatchObject({ approved: true });
    expect(await spending()).toEqual({ day: 2, month: 4, bot: 4 });
    expect(await counter(svc, `card:${decoy.card_id}:p${decoy.decoyIndex}`, 'day')).toBe(200 * 10_000);
    expect(await counter(svc, `card:${decoy.card_id}:p${decoy.decoyIndex}`, 'month')).toBe(400 * 10_000);
    svc.clock.set(day2 + 2 * 86_400_000);
    const [masterMonthly, cardMonthly] = await both();
    expect(masterMonthly!.json()).toMatchObject({
      error: 'master_budget_exceeded',
      limit: 'monthly',
      remaining_usd: 1,
    });
    expect(cardMonthly!.json()).toMatchObject({
      error: 'card_guardrail_violation',
      limit: 'monthly',
      remaining_usd: 1,
    });
    expect(await spending()).toEqual({ day: 0, month: 4, bot: 4 });
    svc.clock.set(Date.UTC(t.getUTCFullYear(), t.getUTCMonth() + 2, 1));
    for (const r of await both()) expect(r.json()).toMatchObject({ approved: true });
    expect(await spending()).toEqual({ day: 2, month: 2, bot: 2 });
  });

  it('403 master_budget_exceeded alike on every profile: a decoy is checked as if it were the real one', async () => {
    const o = await createOwner(svc);
    const bot = await activeBot(svc, o, { fundCents: 10_000 });
    const card = await setupCard(svc, o, bot.bot_id, {
      ...AUTO,
      per_transaction_cents: 1000,
      daily_cents: 100_000,
    });
    for (const index of [card.real_profile_index, card.decoyIndex]) {
      const perTx = await checkout(svc, bot, purchase(index, 600));
      expect(perTx.statusCode).toBe(403);
      expect(perTx.json()).toMatchObject({
        error: 'master_budget_exceeded',
        limit: 'per_transaction',
        limit_usd: 5,
      });
    }
    await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: o.auth,
      payload: { per_transaction_cents: 1000, daily_budget_cents: 1000 },
    });
    // Each profile's world: its own 600 today, so a second 600 passes the $10 day on neither.
    for (const index of [card.real_profile_index, card.decoyIndex]) {
      expect((await checkout(svc, bot, purchase(index, 600))).statusCode).toBe(200);
      const daily = await checkout(svc, bot, purchase(index, 600));
      expect(daily.json()).toMatchObject({
        error: 'master_budget_exceeded',
        limit: 'daily',
        limit_usd: 10,
        remaining_usd: 4,
      });
    }
    // The real budget was spent once (600), by the real profile only.
    expect(await counter(svc, `owner:${o.id}`, 'day')).toBe(600 * 10_000);
    await expectLedgerConsistent(svc, bot.bot_id);
  });

  it('the chain order: a card limit is reported before the allowance, the allowance before the master budget', async () => {
    const o = await createOwner(svc);
    const bot = await activeBot(svc, o, { fundCents: 10_000 });
    const card = await setupCard(svc, o, bot.bot_id, {
      ...AUTO,
      per_transaction_cents: 2000,
      daily_cents: 500,
    });
    await putProfile(svc, o, bot.bot_id, card.card_id, card.real_profile_index, { allowance_cents: 400 });
    expect((await checkout(svc, bot, purchase(card.real_profile_index, 600))).json().error).toBe(
      'card_guardrail_violation',
    );
    await patchCard(svc, o, bot.bot_id, card.card_id, { daily_cents: 100_000 });
    expect((await checkout(svc, bot, purchase(card.real_profile_index, 600))).json().error).toBe(
      'allowance_exceeded',
    );
    await putProfile(svc, o, bot.bot_id, card.card_id, card.real_profile_index, { allowance_cents: 100_000 });
    expect((await checkout(svc, bot, purchase(card.real_profile_index, 600))).json().error).toBe(
      'master_budget_exceeded',
    );
  });

  it('a daily or monthly allowance counts in the card’s own window: the lower limit refuses, the card’s named first', async () => {
    // One row holds both (migration 0059): the day's figure is the card's and the allowance's.
    const o = await createOwner(svc);
    const bot = await activeBot(svc, o, { fundCents: 10_000 });
    const card = await setupCard(svc, o, bot.bot_id, {
      ...AUTO,
      per_transaction_cents: 2000,
      daily_cents: 500,
    });
    const p = card.real_profile_index;
    await putProfile(svc, o, bot.bot_id, card.card_id, p, { allowance_cents: 300, allowance_window: 'day' });
    const error = async (cents: number) => (await checkout(svc, bot, purchase(p, cents))).json().error;
    expect((await checkout(svc, bot, purchase(p, 200))).statusCode).toBe(200);
    expect(await error(200)).toBe('allowance_exceeded');
    expect((await checkout(svc, bot, purchase(p, 100))).statusCode).toBe(200); // exactly the allowance
    expect(await error(1)).toBe('allowance_exceeded');
    await patchCard(svc, o, bot.bot_id, card.card_id, { daily_cents: 300 });
    // Both would refuse: the card's limit comes first in the chain.
    expect((await checkout(svc, bot, purchase(p, 1))).json()).toMatchObject({
      error: 'card_guardrail_violation',
      limit: 'daily',
    });
    await patchCard(svc, o, bot.bot_id, card.card_id, { daily_cents: 100_000 });
    await putProfile(svc, o, bot.bot_id, card.card_id, p, {
      allowance_cents: 400,
      allowance_window: 'month',
    });
    expect((await checkout(svc, bot, purchase(p, 100))).statusCode).toBe(200);
    expect((await checkout(svc, bot, purchase(p, 1))).json()).toMatchObject({
      error: 'allowance_exceeded',
      window: 'month',
      limit_usd: 4,
      remaining_usd: 0,
    });
    expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(400 * 10_000);
  });

  it('402 insufficient_funds, alike for real and decoy profiles', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 300 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    for (const p of [card.real_profile_index, card.decoyIndex]) {
      const res = await checkout(svc, bot, purchase(p, 400));
      expect(res.statusCode).toBe(402);
      expect(res.json()).toMatchObject({ error: 'insufficient_funds', balance_usd: 3 });
    }
    expect(await counter(svc, `card:${card.card_id}`, 'day')).toBe(0);
    expect(await confirmations(bot.bot_id)).toBe(0);
  });

  it('202 pending_confirmation with a hold when approval is needed', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id); // ask_for_everything (default)
    const res = await checkout(svc, bot, purchase(card.real_profile_index, 400));
    expect(res.statusCode).toBe(202);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(
      [
        'approved',
        'status',
        'confirmation_id',
        'profile_index',
        'merchant_name',
        'amount_usd',
        'expires_at',
        'message',
      ].sort(),
    );
    expect(body).toMatchObject({ approved: false, status: 'pending_confirmation', amount_usd: 4 });
    expect(body.expires_at).toBe(new Date(svc.clock.now() + 900_000).toISOString());
    expect(body.expires_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const ledger = await expectLedgerConsistent(svc, bot.bot_id);
    expect(ledger).toMatchObject({ available_micros: 600 * 10_000, held_micros: 400 * 10_000 });
    const decoy = await checkout(svc, bot, purchase(card.decoyIndex, 400));
    expect(decoy.statusCode).toBe(202);
    expect(Object.keys(decoy.json()).sort()).toEqual(Object.keys(body).sort());
    expect(decoy.json().expires_at).toBe(body.expires_at);
    expect((await wallet(svc, bot.bot_id)).held_micros).toBe(400 * 10_000);
  });

  it('approval modes: threshold, categories, and a stricter profile rule', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 5000 });
    const card = await setupCard(svc, owner, bot.bot_id, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 300,
    });
    const p = card.real_profile_index;
    expect((await checkout(svc, bot, purchase(p, 299))).statusCode).toBe(200);
    expect((await checkout(svc, bot, purchase(p, 300))).statusCode).toBe(202);
    await patchCard(svc, owner, bot.bot_id, card.card_id, {
      approval_mode: 'auto_approve_by_category',
      approved_categories: ['SaaS', 'food'],
    });
    expect((await checkout(svc, bot, purchase(p, 100, { category: 'saas' }))).statusCode).toBe(200);
    expect((await checkout(svc, bot, purchase(p, 100, { category: 'retail' }))).statusCode).toBe(202);
    expect((await checkout(svc, bot, purchase(p, 100, { category: undefined }))).statusCode).toBe(202);
    await putProfile(svc, owner, bot.bot_id, card.card_id, p, { approval_rule: 'ask_for_everything' });
    expect((await checkout(svc, bot, purchase(p, 100, { category: 'food' }))).statusCode).toBe(202);
  });

  it('Idempotency-Key replays the first response and moves money once; another body is a 409', async () => {
    const bot = await activeBot(svc, owner, { fundCents: 500 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    const key = { 'idempotency-key': 'order-42' };
    const first = await checkout(svc, bot, purchase(card.real_profile_index, 200), key);
    const again = await checkout(svc, bot, purchase(card.real_profile_index, 200), key);
    expect(first.statusCode).toBe(200);
    expect(again.statusCode).toBe(200);
    expect(again.json()).toEqual(first.json());
    expect((await wallet(svc, bot.bot_id)).available_micros).toBe(300 * 10_000);
    const conflict = await checkout(svc, bot, purchase(card.real_profile_index, 300), key);
    expect(conflict.statusCode).toBe(409);
    expect(conflict.json().error).toBe('idempotency_conflict');
    // Keys are per bot: another bot may use the same key.
    const other = await activeBot(svc, owner, { fundCents: 1000 });
    const otherCard = await setupCard(svc, owner, other.bot_id, AUTO);
    expect((await checkout(svc, other, purchase(otherCard.real_profile_index, 200), key)).statusCode).toBe(
      200,
    );
    // A refused request is not stored: the same key can be retried after the cause is fixed.
    const tooMuch = await checkout(svc, bot, purchase(card.real_profile_index, 400), {
      'idempotency-key': 'k2',
    });
    expect(tooMuch.statusCode).toBe(402);
    await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 1000 },
    });
    expect(
      (await checkout(svc, bot, purchase(card.real_profile_index, 400), { 'idempotency-key': 'k2' }))
        .statusCode,
    ).toBe(200);
    // The key and the request's hash are kept on the confirmation; no response (nor card digits)
    // is stored anywhere.
    const keyed = await svc.ctx.db.query<{ id: string; request_hash: string }>(
      'SELECT id, request_hash FROM checkout_confirmations WHERE bot_id = $1 AND idempotency_key = $2',
      [bot.bot_id, 'order-42'],
    );
    expect(keyed).toEqual([
      { id: first.json().confirmation_id, request_hash: expect.stringMatching(/^[0-9a-f]{64}$/) },
    ]);
    const stored = await svc.ctx.db.query('SELECT 1 FROM checkout_idempotency WHERE bot_id = $1', [
      bot.bot_id,
    ]);
    expect(stored).toEqual([]);
    // After 24 hours the key is free again.
    svc.clock.advance(24 * 3600_000 + 1000);
    const later = await checkout(svc, bot, purchase(card.real_profile_index, 100), key);
    expect(later.statusCode).toBe(200);
    expect(later.json().confirmation_id).not.toBe(first.json().confirmation_id);
    const tooLong = await checkout(svc, bot, purchase(card.real_profile_index, 100), {
      'idempotency-key': 'x'.repeat(256),
    });
    expect(tooLong.statusCode).toBe(400);
    await expectLedgerConsistent(svc, bot.bot_id);
  });

  it('a held purchase replays its 202 after the owner decided; a replay is not rate limited', async () => {
    const limited = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1' } });
    try {
      const o = await createOwner(limited);
      const bot = await activeBot(limited, o, { fundCents: 500 });
      const card = await setupCard(limited, o, bot.bot_id, { approval_mode: 'ask_for_everything' });
      const key = { 'idempotency-key': 'held-1' };
      const first = await checkout(limited, bot, purchase(card.real_profile_index, 200), key);
      expect(first.statusCode).toBe(202);
      const decided = await limited.app.inject({
        method: 'POST',
        url: `/api/v1/owner/approvals/${first.json().confirmation_id}/approve`,
        headers: o.auth,
      });
      expect(decided.statusCode).toBe(200);
      // The hour's one checkout is used: a new request is refused, the replay is answered.
      expect((await checkout(limited, bot, purchase(card.real_profile_index, 200))).statusCode).toBe(429);
      const again = await checkout(limited, bot, purchase(card.real_profile_index, 200), key);
      expect(again.statusCode).toBe(202);
      expect(again.json()).toEqual(first.json());
      const other = await checkout(limited, bot, purchase(card.real_profile_index, 300), key);
      expect(other.statusCode).toBe(409);
      expect(other.json().error).toBe('idempotency_conflict');
      expect((await wallet(limited, bot.bot_id)).available_micros).toBe(300 * 10_000);
    } finally {
      await limited.close();
    }
  });
});

describe('checkout: rate limit', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '3' } });
  });
  afterAll(async () => {
    await svc.close();
  });

  it('429 rate_limited with retry_after_seconds after the hourly limit, per bot', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 5000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    for (let i = 0; i < 3; i++) {
      expect((await checkout(svc, bot, purchase(card.real_profile_index, 100))).statusCode).toBe(200);
      svc.clock.advance(60_000);
    }
    const limited = await checkout(svc, bot, purchase(card.real_profile_index, 100));
    expect(limited.statusCode).toBe(429);
    expect(limited.json()).toMatchObject({ error: 'rate_limited', retry_after_seconds: 3600 - 180 });
    expect(typeof limited.json().message).toBe('string');
    const other = await activeBot(svc, owner, { fundCents: 5000 });
    const otherCard = await setupCard(svc, owner, other.bot_id, AUTO);
    expect((await checkout(svc, other, purchase(otherCard.real_profile_index, 100))).statusCode).toBe(200);
    svc.clock.advance(3600_000);
    expect((await checkout(svc, bot, purchase(card.real_profile_index, 100))).statusCode).toBe(200);
  });
});
