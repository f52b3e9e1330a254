import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatchItemAnswer } from '../../src/spend/batch.ts';
import {
  batchItem,
  type SpendAnswer,
  type SpendParams,
  spendAlone,
  spendQueueLoad,
  spendTogether,
} from '../../src/spend/run.ts';
import { ledgerBalances } from '../../src/wallet/ledger.ts';
import {
  checkout,
  expectLedgerConsistent,
  purchase,
  putProfile,
  setupCard,
  type TestCard,
} from '../checkout/helpers.ts';
import { seeded } from '../splitKnowledge/classify.ts';
import { connectionFor, isPostgres } from '../support/db.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  giveGenerousBudgets,
  type TestOwner,
  type TestService,
} from '../support/service.ts';
import { botWithHoldingCard, ownerWithDailyBudget, spendParams } from './helpers.ts';

// Group commit (src/spend/batch.ts, spend_run_batch.sql): several purchases in one transaction, each
// in a subtransaction of its own. What must hold: every purchase is answered, and writes, exactly
// what its own statement would have; a refused one leaves nothing; a batch runs one purchase per
// owner (in owner order: batches never deadlock); under 150-way load on PostgreSQL batches form and
// every money invariant stays exact.

const LOW_NEVER = -1;

describe('spend_run_batch: several purchases in one transaction', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
  });
  afterAll(async () => svc?.close());

  interface Side {
    owner: TestOwner;
    botId: string;
    card: TestCard;
  }
  const params = (s: Side, real: boolean, amountMicros: number, rateLimit = 100_000): SpendParams => ({
    ...spendParams(
      svc,
      s.botId,
      {
        kind: 'card',
        cardId: s.card.card_id,
        profileIndex: real ? s.card.real_profile_index : s.card.decoyIndex,
      },
      amountMicros,
      `batch:${s.botId}`,
    ),
    rateLimit,
  });

  /** An answer without what differs between two sides of one trial (ids, secrets). */
  function comparable(a: SpendAnswer | null | undefined): unknown {
    if (a === null || a === undefined) return a;
    if (a.refused) return { refused: a.r };
    return { held: a.r.held, is_real: a.r.is_real, available_before: a.r.available_before };
  }

  async function state(s: Side): Promise<unknown> {
    const [wallet] = await svc.ctx.db.query(
      `SELECT available_micros::bigint AS available, held_micros::bigint AS held,
              decoy_spent_micros::bigint AS decoy_spent, decoy_held_micros::bigint AS decoy_held
         FROM wallets WHERE bot_id = $1`,
      [s.botId],
    );
    const windows = await svc.ctx.db.query<{ scope: string; d: string; w: string; m: string }>(
      `SELECT scope, day_micros::text AS d, week_micros::text AS w, month_micros::text AS m FROM spend_windows
        WHERE scope = $1 OR scope LIKE $2 OR scope = $3 ORDER BY scope`,
      [`owner:${s.owner.id}`, `card:${s.card.card_id}%`, `bot:${s.botId}`],
    );
    const confirmations = await svc.ctx.db.query(
      `SELECT status, is_real, count(*)::int AS n FROM checkout_confirmations WHERE bot_id = $1
        GROUP BY status, is_real ORDER BY status, is_real`,
      [s.botId],
    );
    const events = await svc.ctx.db.query('SELECT count(*)::int AS n FROM events WHERE bot_id = $1', [
      s.botId,
    ]);
    const rate = await svc.ctx.db.query('SELECT count(*)::int AS n FROM rate_limits WHERE key = $1', [
      `batch:${s.botId}`,
    ]);
    return {
      wallet,
      windows: windows.map((w) => ({
        scope: w.scope
          .replace(s.owner.id, 'O')
          .replace(s.card.card_id, 'C')
          .replace(s.botId, 'B')
          .replace(/:p\d+$/, ':decoy'),
        d: w.d,
        w: w.w,
        m: w.m,
      })),
      confirmations,
      events,
      rate,
      ledger: await ledgerBalances(svc.ctx.db, s.botId),
    };
  }

  it('answers and writes, purchase by purchase, what each purchase alone would have (seeded trial, 4 owners)', async () => {
    const OWNERS = 4;
    const PER_OWNER = 30;
    // Each owner twice, set up alike: side a runs its purchases one statement at a time, side b the
    // same purchases in batches of one purchase per owner, in the same order per owner.
    const sides: { a: Side; b: Side }[] = [];
    for (let k = 0; k < OWNERS; k++) {
      const a = await botWithHoldingCard(svc);
      const b = await botWithHoldingCard(svc);
      sides.push({ a: { ...a, botId: a.botId }, b: { ...b, botId: b.botId } });
    }
    const random = seeded(30_2026);
    // $0.50 to $60 (held from $10), now and then over the card's $1,000 per purchase; a quarter on a
    // decoy; a rate limit of 26 an hour. Funds ($1,000) run out before the rate limit does.
    const AMOUNTS = [500_000, 3_000_000, 9_990_000, 10_000_000, 25_000_000, 60_000_000, 1_500_000_000];
    const plan = sides.map(() =>
      Array.from({ length: PER_OWNER }, () => ({
        real: random() >= 0.25,
        amount: AMOUNTS[Math.floor(random() * AMOUNTS.length)] as number,
      })),
    );

    const alone: unknown[][] = sides.map(() => []);
    for (let k = 0; k < OWNERS; k++) {
      const side = sides[k]?.a as Side;
      for (const p of plan[k] ?? []) {
        alone[k]?.push(
          comparable(await spendAlone(svc.ctx.db, params(side, p.real, p.amount, 26), LOW_NEVER)),
        );
      }
    }
    const together: unknown[][] = sides.map(() => []);
    for (let i = 0; i < PER_OWNER; i++) {
      // Reversed owner order in every other batch: the function orders them itself.
      const order = i % 2 === 0 ? sides.map((_, k) => k) : sides.map((_, k) => OWNERS - 1 - k);
      const list = order.map((k) => {
        const p = plan[k]?.[i] as { real: boolean; amount: number };
        return params(sides[k]?.b as Side, p.real, p.amount, 26);
      });
      const answers = await spendTogether(svc.ctx.db, list, LOW_NEVER);
      expect(answers).toHaveLength(OWNERS);
      answers.forEach((a, j) => {
        if (a === 'later' || a === 'alone') throw new Error(`item ${j} of batch ${i} answered ${a}`);
        together[order[j] as number]?.push(comparable(a.result));
      });
    }
    expect(together).toEqual(alone);
    const kinds = new Set(alone.flat().map((a) => JSON.stringify(a).replace(/[0-9]+/g, '')));
    // The trial met approvals, holds, decoys and several refusals (else it proved little).
    expect(kinds.size).toBeGreaterThanOrEqual(5);
    for (const { a, b } of sides) {
      expect(await state(b)).toEqual(await state(a));
      await expectLedgerConsistent(svc, b.botId);
    }
  });

  it('runs one purchase per owner: a second purchase of the same owner is answered later and writes nothing', async () => {
    const owner = await createOwner(svc);
    const first = await botWithHoldingCard(svc);
    // A second bot of the first side's owner.
    const second = await activeBot(svc, first.owner, { fundCents: 100_000 });
    const secondCard = await setupCard(svc, first.owner, second.bot_id, { per_transaction_cents: 100_000 });
    const other = await botWithHoldingCard(svc);
    expect(owner.id).not.toBe(first.owner.id);
    const answers = await spendTogether(
      svc.ctx.db,
      [
        params(first, true, 1_000_000),
        params({ owner: first.owner, botId: second.bot_id, card: secondCard }, true, 1_000_000),
        params(other, true, 1_000_000),
      ],
      LOW_NEVER,
    );
    expect(answers[1]).toBe('later');
    for (const i of [0, 2]) expect((answers[i] as { result: SpendAnswer }).result.refused).toBe(false);
    const written = await svc.ctx.db.query('SELECT count(*)::int AS n FROM rate_limits WHERE key = $1', [
      `batch:${second.bot_id}`,
    ]);
    expect(written[0]?.n).toBe(0);
    expect((await ledgerBalances(svc.ctx.db, second.bot_id)).merchant_settlement).toBe(0);
  });

  it('a refused purchase or one crossing the low-balance mark leaves nothing; the others commit', async () => {
    // The low mark just under the crossing bot's visible balance (its $1,000 less its decoy reserve):
    // its $1 purchase crosses it. The other two bots' balances are far below it ($10): theirs cannot.
    const crossing = await botWithHoldingCard(svc);
    const small = async (): Promise<Side> => {
      const owner = await createOwner(svc);
      await giveGenerousBudgets(svc, owner);
      const bot = await activeBot(svc, owner, { fundCents: 1000 });
      const card = await setupCard(svc, owner, bot.bot_id, { per_transaction_cents: 1000 });
      return { owner, botId: bot.bot_id, card };
    };
    const rich = await small();
    const refused = await small();
    const before = await state(refused);
    const beforeCrossing = await state(crossing);
    const [visible] = await svc.ctx.db.query<{ v: string }>(
      'SELECT (available_micros - decoy_spent_micros - decoy_held_micros)::text AS v FROM wallets WHERE bot_id = $1',
      [crossing.botId],
    );
    const answers = await spendTogether(
      svc.ctx.db,
      [params(rich, true, 100_000), params(refused, true, 20_000_000), params(crossing, true, 1_000_000)],
      Number(visible?.v) - 500_000,
    );
    const [ok, no, needs] = answers as BatchItemAnswer<SpendAnswer | null>[];
    expect((ok as { result: SpendAnswer }).result.r.ok).toBe(true);
    expect((no as { result: SpendAnswer }).result).toEqual({
      refused: true,
      r: { error: 'limit', name: 'card_per_transaction', limit_micros: 10_000_000 },
    });
    expect(needs).toEqual({ result: null });
    expect(await state(refused)).toEqual(before);
    expect(await state(crossing)).toEqual(beforeCrossing);
    const l = await ledgerBalances(svc.ctx.db, rich.botId);
    expect(l.merchant_settlement + l.wallet_held).toBe(100_000);
  });

  it('refuses a batch that is not an array of at most 64 items, writing nothing', async () => {
    for (const items of ['{}', '"x"', JSON.stringify(Array.from({ length: 65 }, () => ({})))]) {
      await expect(svc.ctx.db.query('SELECT spend_run_batch($1::jsonb) AS r', [items])).rejects.toThrow(
        /at most 64 items/,
      );
    }
  });
});

describe.runIf(isPostgres)('group commit under concurrency (PostgreSQL)', () => {
  let svc: TestService;
  beforeAll(async () => {
    // Two purchase calls in flight: 150 requests at once wait, and share transactions.
    svc = await createTestService({
      env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000', SPEND_CONCURRENCY: '2' },
    });
  });
  afterAll(async () => svc?.close());

  it("150 parallel checkouts of 5 owners' 10 bots, each owner's master day at $12: batches form, exactly 12 pass per owner", async () => {
    const owners: {
      owner: TestOwner;
      bots: { bot: Awaited<ReturnType<typeof activeBot>>; card: TestCard }[];
    }[] = [];
    for (let k = 0; k < 5; k++) {
      const owner = await ownerWithDailyBudget(svc, 1200);
      const bots = [];
      for (let j = 0; j < 2; j++) {
        const bot = await activeBot(svc, owner, { fundCents: 10_000 });
        const card = await setupCard(svc, owner, bot.bot_id, {
          approval_mode: 'auto_approve_under_threshold',
          approval_threshold_cents: 1_000_000,
          per_transaction_cents: 100_000,
          daily_cents: 1_000_000,
          monthly_cents: 10_000_000,
        });
        await putProfile(svc, owner, bot.bot_id, card.card_id, card.real_profile_index, {
          allowance_cents: 1_000_000,
        });
        bots.push({ bot, card });
      }
      owners.push({ owner, bots });
    }
    const before = spendQueueLoad(svc.ctx.db);
    const jobs = Array.from({ length: 150 }, (_, i) => {
      const o = owners[i % 5] as (typeof owners)[number];
      const b = o.bots[Math.floor(i / 5) % 2] as (typeof o.bots)[number];
      return { ownerIndex: i % 5, b };
    });
    const results = await Promise.all(
      jobs.map((j) => checkout(svc, j.b.bot, purchase(j.b.card.real_profile_index, 100))),
    );
    const after = spendQueueLoad(svc.ctx.db);
    expect(after.batches - before.batches).toBeGreaterThan(0);
    expect(after.batched - before.batched).toBeGreaterThan(after.batches - before.batches);
    for (const r of results) expect([200, 403], r.body).toContain(r.statusCode);
    for (let k = 0; k < 5; k++) {
      const mine = results.filter((_, i) => jobs[i]?.ownerIndex === k);
      expect(mine.filter((r) => r.statusCode === 200)).toHaveLength(12);
      expect(
        mine.filter((r) => r.statusCode === 403).every((r) => r.json().error === 'master_budget_exceeded'),
      ).toBe(true);
      let spent = 0;
      for (const { bot } of owners[k]?.bots ?? [])
        spent += (await expectLedgerConsistent(svc, bot.bot_id)).merchant_settlement;
      expect(spent).toBe(1200 * 10_000);
    }
    expect(after.waiting).toBe(0);
  });

  it('batches of the same owners in every order, on 8 connections at once, never deadlock', async () => {
    // Six owners, each with one funded bot; 8 sessions each run 15 batches holding a purchase of every
    // owner in a shuffled order. The function runs them in owner order, so no batch waits on another
    // in a cycle: a deadlock would show as an item answered 40P01 (after deadlock_timeout).
    const sides: Side[] = [];
    for (let k = 0; k < 6; k++) sides.push(await botWithHoldingCard(svc));
    const random = seeded(8_15);
    const items = (s: Side) => {
      const p = spendParams(
        svc,
        s.botId,
        { kind: 'card', cardId: s.card.card_id, profileIndex: s.card.real_profile_index },
        10_000,
        `deadlock:${s.botId}`,
      );
      return p;
    };
    const clients = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const c = new pg.Client({ connectionString: connectionFor(svc.database.schema as string) });
        await c.connect();
        return c;
      }),
    );
    try {
      const plans = clients.map(() =>
        Array.from({ length: 15 }, () => [...sides].sort(() => random() - 0.5).map((s) => items(s))),
      );
      const errors: unknown[] = [];
      await Promise.all(
        clients.map(async (c, i) => {
          for (const list of plans[i] ?? []) {
            const body = JSON.stringify(
              list.map((p) => batchItem({ ...p, lowBalanceMicros: null, announce: false })),
            );
            const { rows } = await c.query<{ r: Record<string, unknown>[] }>(
              'SELECT spend_run_batch($1::jsonb) AS r',
              [body],
            );
            for (const a of rows[0]?.r ?? []) if (a.r === undefined) errors.push(a);
          }
        }),
      );
      expect(errors).toEqual([]);
      for (const s of sides) {
        const l = await expectLedgerConsistent(svc, s.botId);
        expect(l.merchant_settlement).toBe(8 * 15 * 10_000);
      }
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  interface Side {
    owner: TestOwner;
    botId: string;
    card: TestCard;
  }
});
