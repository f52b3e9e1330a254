import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type AttemptParams,
  type AttemptResult,
  checkoutAlone,
  cardSpendParams,
  checkoutAttempt,
  parseAttempt,
} from '../../src/checkout/attempt.ts';
import { LOW_BALANCE_MICROS } from '../../src/owners/funding.ts';
import { namedCall, namedInsert } from '../../src/platform/db/named.ts';
import { newId } from '../../src/platform/ids.ts';
import { spendCall } from '../../src/spend/run.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { setupCard, type TestCard } from './helpers.ts';

// spend_run's card method called directly through its typed interface (src/checkout/attempt.ts): one row per
// rule of the guardrail chain, each on a fresh owner, bot and card whose limits are all generous
// except the one the row tightens; each row both ways the service calls it, as a statement on its
// own (checkoutAlone) and inside a transaction (checkoutAttempt). A refusal must leave nothing
// behind either way: no confirmation, and neither the rate-limit hit nor the counters added by
// the rules it passed before the one that refused.

interface Fixture {
  svc: TestService;
  ownerId: string;
  botId: string;
  card: TestCard;
}

interface Row {
  rule: string;
  /** Tightens one thing (SQL or API calls). */
  setup?: (f: Fixture) => Promise<unknown>;
  params?: (f: Fixture) => Partial<AttemptParams>;
  expected: (f: Fixture) => AttemptResult | Record<string, unknown>;
}

// Amounts in micros (spend_run counts micros since migration 0050): $10 against $500.
const AMOUNT = 10_000_000;
const FUNDS_CENTS = 50_000;
const FUNDS = FUNDS_CENTS * 10_000;

const sql = (f: Fixture, text: string, params: unknown[]) => f.svc.ctx.db.query(text, params);

const ROWS: Row[] = [
  {
    rule: '0. rate limit: the bot has used its checkouts of the hour',
    setup: (f) =>
      sql(f, 'INSERT INTO rate_limits (key, hits) VALUES ($1, ARRAY[$2::timestamptz, $2::timestamptz])', [
        `checkout:${f.botId}`,
        new Date(f.svc.clock.now() - 60_000),
      ]),
    params: () => ({ rateLimit: 2 }),
    expected: () => ({ ok: false, refusal: { error: 'rate_limited', retryAfterSeconds: 3540 } }),
  },
  {
    rule: '1. wallet not active (not claimed)',
    setup: (f) => sql(f, "UPDATE wallets SET status = 'pending' WHERE bot_id = $1", [f.botId]),
    expected: () => ({ ok: false, refusal: { error: 'wallet_not_active' } }),
  },
  {
    rule: '1. wallet frozen',
    setup: (f) => sql(f, "UPDATE wallets SET status = 'frozen' WHERE bot_id = $1", [f.botId]),
    expected: () => ({ ok: false, refusal: { error: 'wallet_frozen' } }),
  },
  {
    rule: '2. named card not found (or not this bot’s)',
    params: () => ({ cardId: 'card_unknown' }),
    expected: () => ({ ok: false, refusal: { error: 'card_not_found' } }),
  },
  {
    rule: '2. card not active',
    setup: (f) => sql(f, "UPDATE cards SET status = 'frozen' WHERE id = $1", [f.card.card_id]),
    expected: () => ({ ok: false, refusal: { error: 'card_not_active' } }),
  },
  {
    rule: '2. several active cards and none named',
    setup: async (f) => {
      const owner = await ownerAuth(f);
      await setupCard(f.svc, owner, f.botId);
    },
    expected: () => ({ ok: false, refusal: { error: 'card_id_required' } }),
  },
  {
    rule: '2. disabled profile',
    setup: (f) =>
      sql(f, 'UPDATE card_profiles SET enabled = false WHERE card_id = $1 AND profile_index = $2', [
        f.card.card_id,
        f.card.real_profile_index,
      ]),
    expected: () => ({ ok: false, refusal: { error: 'invalid_profile' } }),
  },
  {
    rule: '3. card per-transaction limit',
    setup: (f) => sql(f, 'UPDATE cards SET per_transaction_micros = 5000000 WHERE id = $1', [f.card.card_id]),
    expected: () => ({
      ok: false,
      refusal: { error: 'per_transaction', name: 'card_per_transaction', limitMicros: 5_000_000 },
    }),
  },
  {
    rule: '3. card daily limit',
    setup: (f) => sql(f, 'UPDATE cards SET daily_micros = 5000000 WHERE id = $1', [f.card.card_id]),
    expected: () => ({
      ok: false,
      refusal: { error: 'window_limit', name: 'card_daily', limitMicros: 5_000_000, spentMicros: 0 },
    }),
  },
  {
    rule: '3. card monthly limit',
    setup: (f) => sql(f, 'UPDATE cards SET monthly_micros = 15000000 WHERE id = $1', [f.card.card_id]),
    params: () => ({ amountMicros: 16_000_000 }),
    expected: () => ({
      ok: false,
      refusal: { error: 'window_limit', name: 'card_monthly', limitMicros: 15_000_000, spentMicros: 0 },
    }),
  },
  {
    rule: '4. profile allowance',
    setup: (f) =>
      sql(
        f,
        'UPDATE card_profiles SET allowance_micros = 5000000 WHERE card_id = $1 AND profile_index = $2',
        [f.card.card_id, f.card.real_profile_index],
      ),
    expected: () => ({
      ok: false,
      refusal: { error: 'allowance', limitMicros: 5_000_000, spentMicros: 0, window: 'month' },
    }),
  },
  {
    rule: '5. master per-transaction limit',
    setup: (f) =>
      sql(f, 'UPDATE owners SET master_per_transaction_micros = 5000000 WHERE id = $1', [f.ownerId]),
    expected: () => ({
      ok: false,
      refusal: { error: 'per_transaction', name: 'master_per_transaction', limitMicros: 5_000_000 },
    }),
  },
  {
    rule: '5. master daily budget',
    setup: (f) => sql(f, 'UPDATE owners SET master_daily_micros = 5000000 WHERE id = $1', [f.ownerId]),
    expected: () => ({
      ok: false,
      refusal: { error: 'window_limit', name: 'master_daily', limitMicros: 5_000_000, spentMicros: 0 },
    }),
  },
  {
    rule: '5. master monthly budget',
    setup: (f) => sql(f, 'UPDATE owners SET master_monthly_micros = 5000000 WHERE id = $1', [f.ownerId]),
    expected: () => ({
      ok: false,
      refusal: { error: 'window_limit', name: 'master_monthly', limitMicros: 5_000_000, spentMicros: 0 },
    }),
  },
  {
    rule: '6. funds (the visible balance)',
    params: () => ({ amountMicros: FUNDS + 1 }),
    expected: () => ({ ok: false, refusal: { error: 'insufficient_funds', balanceMicros: FUNDS } }),
  },
  {
    rule: '7. approval: the card asks for everything → held',
    setup: (f) =>
      sql(f, "UPDATE cards SET approval_mode = 'ask_for_everything' WHERE id = $1", [f.card.card_id]),
    expected: (f) => passed(f, { held: true, isReal: true }),
  },
  {
    rule: '7. approval: a stricter profile rule → held',
    setup: (f) =>
      sql(
        f,
        "UPDATE card_profiles SET approval_rule = 'ask_for_everything' WHERE card_id = $1 AND profile_index = $2",
        [f.card.card_id, f.card.real_profile_index],
      ),
    expected: (f) => passed(f, { held: true, isReal: true }),
  },
  {
    rule: '7. approval: under the card threshold → approved',
    expected: (f) => passed(f, { held: false, isReal: true }),
  },
  {
    rule: '7. approval: a decoy profile passes the same chain → approved, not real',
    params: (f) => ({ profileIndex: f.card.decoyIndex }),
    expected: (f) => passed(f, { held: false, isReal: false, profileWindow: 'week' }),
  },
];

function passed(f: Fixture, fields: Partial<AttemptResult & { ok: true }>) {
  return {
    ok: true,
    cardId: f.card.card_id,
    ownerId: f.ownerId,
    availableBeforeMicros: FUNDS,
    profileWindow: 'month',
    cardCreatedAt: expect.any(Date),
    profilesEnc: expect.any(String),
    missingPosition: expect.any(Number),
    ...fields,
  };
}

let ownerTokens: Map<string, Awaited<ReturnType<typeof createOwner>>>;
async function ownerAuth(f: Fixture) {
  const owner = ownerTokens.get(f.ownerId);
  if (!owner) throw new Error('no owner');
  return owner;
}

describe('checkout_attempt: one row per rule of the guardrail chain', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
    ownerTokens = new Map();
  });
  afterAll(async () => {
    await svc.close();
  });

  async function fixture(): Promise<Fixture> {
    const owner = await createOwner(svc);
    ownerTokens.set(owner.id, owner);
    const bot = await activeBot(svc, owner, { fundCents: FUNDS_CENTS });
    const card = await setupCard(svc, owner, bot.bot_id);
    // Everything generous: each row tightens one rule.
    await svc.ctx.db.query(
      `UPDATE owners SET master_per_transaction_micros = 10000000000, master_daily_micros = 100000000000,
              master_monthly_micros = 1000000000000 WHERE id = $1`,
      [owner.id],
    );
    await svc.ctx.db.query(
      `UPDATE cards SET per_transaction_micros = 10000000000, daily_micros = 100000000000, monthly_micros = 1000000000000,
              approval_mode = 'auto_approve_under_threshold', approval_threshold_micros = 10000000000 WHERE id = $1`,
      [card.card_id],
    );
    await svc.ctx.db.query(
      `UPDATE card_profiles SET allowance_micros = 1000000000000, allowance_window = 'month'
        WHERE card_id = $1 AND profile_index = $2`,
      [card.card_id, card.real_profile_index],
    );
    return { svc, ownerId: owner.id, botId: bot.bot_id, card };
  }

  function params(f: Fixture): AttemptParams {
    return {
      botId: f.botId,
      cardId: null,
      profileIndex: f.card.real_profile_index,
      amountMicros: AMOUNT,
      category: null,
      confirmationId: newId('chk'),
      merchantName: 'Table Store',
      merchantUrl: 'https://table.example/item',
      itemName: 'Row',
      taskId: null,
      now: svc.clock.now(),
      approvalWindowSeconds: 900,
      ledgerTransactionId: newId('ltx'),
      eventId: newId('evt'),
      eventBody: '{}',
      rateKey: `checkout:${f.botId}`,
      rateLimit: 30,
      idempotencyKey: null,
      requestHash: null,
    };
  }

  /** What a refused call must not change: the counters of the fixture's scopes, its rate-limit row, its ledger. */
  async function footprint(f: Fixture): Promise<unknown[]> {
    return svc.ctx.db.query(
      `SELECT 'w' AS t, scope AS k, day_micros::text || '/' || week_micros::text || '/' || month_micros::text AS v
         FROM spend_windows WHERE scope LIKE ANY (ARRAY['card:' || $1 || '%', 'owner:' || $2 || '%', 'bot:' || $3])
       UNION ALL SELECT 'r', key, cardinality(hits)::text FROM rate_limits WHERE key = 'checkout:' || $3
       UNION ALL SELECT 'l', bot_id, count(*)::text FROM ledger_entries WHERE bot_id = $3 GROUP BY bot_id
       ORDER BY 1, 2`,
      [f.card.card_id, f.ownerId, f.botId],
    );
  }

  const MODES = ['alone', 'in a transaction'] as const;
  it.each(ROWS.flatMap((r) => MODES.map((m) => [r.rule, m, r] as const)))(
    '%s (%s)',
    async (_rule, mode, row) => {
      const f = await fixture();
      await row.setup?.(f);
      const p = { ...params(f), ...row.params?.(f) };
      const before = await footprint(f);
      const result =
        mode === 'alone'
          ? await checkoutAlone(svc.ctx.db, p, LOW_BALANCE_MICROS)
          : await svc.ctx.db.transaction((tx) => checkoutAttempt(tx, p));
      if (result === null) throw new Error('the balance stays far above the low mark: no transaction needed');
      const expected = row.expected(f);
      if (expected.ok === false) expect(result).toEqual(expected);
      else expect(result).toMatchObject(expected);
      const confirmations = await svc.ctx.db.query<{ status: string; is_real: boolean }>(
        'SELECT status, is_real FROM checkout_confirmations WHERE id = $1',
        [p.confirmationId],
      );
      if (result.ok === 'replay') throw new Error('no key was sent: nothing to replay');
      if (result.ok) {
        expect(confirmations).toEqual([
          { status: result.held ? 'pending' : 'approved', is_real: result.isReal },
        ]);
        expect(await footprint(f)).not.toEqual(before);
      } else {
        expect(confirmations).toEqual([]);
        expect(await footprint(f)).toEqual(before);
      }
    },
  );

  it('alone, a purchase that takes the visible balance below the low mark writes nothing and asks for a transaction', async () => {
    const f = await fixture();
    // Down to exactly the mark: not below it, so no event is due and the call commits on its own.
    const toMark = { ...params(f), amountMicros: FUNDS - LOW_BALANCE_MICROS };
    expect(await checkoutAlone(svc.ctx.db, toMark, LOW_BALANCE_MICROS)).toMatchObject({ ok: true });
    // One micro more crosses it.
    const crossing = { ...params(f), amountMicros: 1 };
    const before = await footprint(f);
    expect(await checkoutAlone(svc.ctx.db, crossing, LOW_BALANCE_MICROS)).toBeNull();
    expect(await footprint(f)).toEqual(before);
    expect(
      await svc.ctx.db.query('SELECT 1 FROM checkout_confirmations WHERE id = $1', [crossing.confirmationId]),
    ).toEqual([]);
    // In a transaction the same call passes (the caller writes the event beside it).
    const inTx = await svc.ctx.db.transaction((tx) => checkoutAttempt(tx, crossing));
    expect(inTx).toMatchObject({ ok: true, availableBeforeMicros: LOW_BALANCE_MICROS });
  });

  it("the previous version's checkout_run still answers (a wrapper of spend_run's card method, for a rolling deploy)", async () => {
    const f = await fixture();
    const p = params(f);
    const {
      p_method: _method,
      p_payment: _payment,
      p_domain_refused: _verdict,
      p_announce: _announce,
      ...old
    } = Object.fromEntries(
      [...spendCall.sql.matchAll(/(p_[a-z_]+) => \$(\d+)/g)].map((m) => [
        m[1] as string,
        spendCall.params({ ...cardSpendParams(p), lowBalanceMicros: null, announce: true })[Number(m[2]) - 1],
      ]),
    );
    const names = Object.keys(old);
    const call = (values: Record<string, unknown>) =>
      svc.ctx.db.query<{ r: Record<string, unknown> }>(
        `SELECT checkout_run(${names.map((n, i) => `${n} => $${i + 1}`).join(', ')}) AS r`,
        names.map((n) => values[n]),
      );
    const passed = await call(old);
    expect(parseAttempt(passed[0]!.r)).toMatchObject({ ok: true, held: false, cardId: f.card.card_id });
    // A refusal is raised as before (SQLSTATE BP001, the refusal as the message).
    await expect(call({ ...old, p_id: newId('chk'), p_card_id: 'card_unknown' })).rejects.toMatchObject({
      code: 'BP001',
      message: expect.stringContaining('card_not_found'),
    });
  });

  it('passes every parameter of the database function by name, once', async () => {
    const rows = await svc.ctx.db.query<{ names: string[]; nargs: number }>(
      `SELECT proargnames AS names, pronargs AS nargs FROM pg_proc
        WHERE proname = 'spend_run' AND pronamespace = current_schema()::regnamespace`,
    );
    expect(rows).toHaveLength(1);
    const named = [...spendCall.sql.matchAll(/(p_[a-z_]+) => \$(\d+)/g)].map((m) => m[1]);
    expect([...named].sort()).toEqual([...(rows[0]?.names ?? [])].sort());
    expect(named).toHaveLength(rows[0]?.nargs ?? -1);
  });

  it('named statements take identifiers from the code only', () => {
    expect(namedCall<{ a: number }>('f', { p_a: (x) => x.a }).sql).toBe('f(p_a => $1)');
    const insert = namedInsert<{ a: number; b: string }>('t', { a: (x) => x.a, b: (x) => x.b });
    expect(insert.sql).toBe('INSERT INTO t (a, b) VALUES ($1, $2)');
    expect(insert.params({ a: 1, b: 'x' })).toEqual([1, 'x']);
    expect(() => namedInsert('t; DROP TABLE bots', {})).toThrow(/identifier/);
    expect(() => namedCall('f', { 'p) OR 1=1 --': () => 1 })).toThrow(/identifier/);
  });

  it('an answer of an unexpected shape is an error, not a guess', () => {
    expect(() => parseAttempt({ error: 'limit', name: 'card_weekly', limit_micros: 1 })).toThrow(
      /unexpected/,
    );
    expect(() => parseAttempt({ error: 'insufficient_funds' })).toThrow(/unexpected/);
    expect(() => parseAttempt({ ok: true, held: 'no' })).toThrow(/unexpected/);
    expect(() => parseAttempt({})).toThrow(/unexpected/);
  });
});
