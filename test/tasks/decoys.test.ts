import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processDueConfirmations } from '../../src/checkout/decisions.ts';
import { SHOPS, shopsForCategory } from '../../src/merchants/catalog.ts';
import {
  DECOY_DELAY_MAX_MS,
  DECOY_DELAY_MIN_MS,
  decoyContent,
  decoyProfileWeights,
  runTasksOnce,
  WARMUP_MS,
  WARMUP_SLOTS,
} from '../../src/tasks/engine.ts';
import {
  checkout,
  events,
  expectLedgerConsistent,
  patchCard,
  purchase,
  putProfile,
  wallet,
} from '../checkout/helpers.ts';
import { isPostgres } from '../support/db.ts';
import { createTestService, type TestService } from '../support/service.ts';
import {
  autoApprove,
  HOUR,
  html,
  MINUTE,
  nextTask,
  taskRow,
  taskRows,
  tick,
  type World,
  world,
} from './helpers.ts';

// Decoy pacing on a fake clock: warm-up, about 3 per real purchase, idle after a quiet day; decoys
// resemble the real traffic, run through the checkout chain, and never move money.

const bigLimits = { per_transaction_cents: 5000, daily_cents: 1_000_000, monthly_cents: 10_000_000 };

async function decoys(svc: TestService, botId: string) {
  return (await taskRows(svc, botId)).filter((t) => t.is_decoy);
}

/** Ticks every `step` from now until `until` (the engine job's cadence, compressed). */
async function runUntil(svc: TestService, until: number, step = 30 * MINUTE) {
  while (svc.clock.now() + step <= until) {
    svc.clock.advance(step);
    await tick(svc);
  }
  svc.clock.set(until);
  await tick(svc);
}

describe('decoy pacing', () => {
  let svc: TestService;
  let w: World;
  let activatedAt: number;
  beforeAll(async () => {
    svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
    w = await world(svc, { patch: { ...bigLimits, ...autoApprove }, fundCents: 1_000_000, wideMaster: true });
    // Every profile gets the same allowance (the owner guide's advice), so decoy amounts can follow
    // the real ones instead of being capped at a quarter of a smaller allowance.
    for (let i = 1; i <= 6; i++) {
      await putProfile(svc, w.owner, w.bot.bot_id, w.card.card_id, i, { allowance_cents: 10_000_000 });
    }
    activatedAt = svc.clock.now();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('plans the warm-up once, one decoy in each 12-hour slot of the first 48 hours, even when ticks race', async () => {
    const results = await Promise.all([runTasksOnce(svc.ctx), runTasksOnce(svc.ctx)]);
    expect(results.filter((r) => r.leader).length).toBeGreaterThanOrEqual(1);
    await tick(svc);
    const planned = await decoys(svc, w.bot.bot_id);
    expect(planned).toHaveLength(WARMUP_SLOTS);
    const slot = WARMUP_MS / WARMUP_SLOTS;
    // Times are rounded up to the 5-minute grid, so a slot's decoy may fall on the slot's last mark.
    const slots = planned
      .map((t) => Math.ceil((new Date(t.due_at).getTime() - activatedAt) / slot) - 1)
      .sort();
    expect(slots).toEqual([0, 1, 2, 3]);
    for (const t of planned) {
      expect(t.status).toBe('planned');
      expect(t.profile_index).not.toBe(w.card.real_profile_index);
      expect(new Date(t.due_at).getTime() % (5 * MINUTE)).toBe(0);
    }
    // Planned decoys are invisible until their time.
    const first = Math.min(...planned.map((t) => new Date(t.due_at).getTime()));
    svc.clock.set(first - 1);
    await tick(svc);
    expect((await nextTask(svc, w.bot)).has_task).toBe(false);
  });

  it('releases each warm-up decoy at its time with task.available; then, with no real purchase, stays idle', async () => {
    await runUntil(svc, activatedAt + WARMUP_MS + 48 * HOUR);
    const all = await decoys(svc, w.bot.bot_id);
    expect(all).toHaveLength(WARMUP_SLOTS);
    for (const t of all) {
      expect(t.status).not.toBe('planned');
      const available = new Date(t.available_at!).getTime();
      const due = new Date(t.due_at).getTime();
      expect(available).toBeGreaterThanOrEqual(due);
      expect(available - due).toBeLessThan(30 * MINUTE);
    }
    expect(await events(svc, w.bot.bot_id, 'task.available')).toHaveLength(WARMUP_SLOTS);
  });

  it('plans about 3 decoys per real purchase, like its amounts and category, within 20 hours of it', async () => {
    const realCount = 20;
    const created: number[] = [];
    for (let i = 0; i < realCount; i++) {
      svc.clock.advance(MINUTE);
      const res = await checkout(
        svc,
        w.bot,
        purchase(w.card.real_profile_index, 1200 + 30 * i, {
          category: 'Books',
          merchant_name: 'Some Bookshop',
        }),
      );
      expect(res.statusCode, res.body).toBe(200);
      created.push(svc.clock.now());
    }
    const before = (await decoys(svc, w.bot.bot_id)).length;
    await tick(svc);
    await tick(svc);
    const fresh = (await decoys(svc, w.bot.bot_id)).slice(0).filter((t) => t.status === 'planned');
    expect(fresh.length + before).toBe((await decoys(svc, w.bot.bot_id)).length);
    // Each purchase gets 2, 3, 3 or 4: a total of 40..80, about 60.
    expect(fresh.length).toBeGreaterThanOrEqual(45);
    expect(fresh.length).toBeLessThanOrEqual(75);
    const books = shopsForCategory('books').map((s) => s.name);
    for (const t of fresh) {
      const due = new Date(t.due_at).getTime();
      expect(due).toBeGreaterThanOrEqual(created[0]! + DECOY_DELAY_MIN_MS);
      expect(due).toBeLessThanOrEqual(created.at(-1)! + DECOY_DELAY_MAX_MS + 5 * MINUTE);
      expect(t.category).toBe('Books');
      expect(books).toContain(t.merchant_name);
      expect(Number(t.amount_cents)).toBeLessThanOrEqual(bigLimits.per_transaction_cents);
      expect(t.profile_index).not.toBe(w.card.real_profile_index);
    }
    // Amounts sit near the real ones (1200..1770, give or take a quarter), within the shop's range.
    const amounts = fresh.map((t) => Number(t.amount_cents));
    const mean = amounts.reduce((a, b) => a + b, 0) / amounts.length;
    expect(mean).toBeGreaterThan(900);
    expect(mean).toBeLessThan(2500);
    // Three decoy profiles are busy and the other two quiet, so no profile is far ahead of the real one.
    const perProfile = new Map<number, number>();
    for (const t of fresh) perProfile.set(t.profile_index, (perProfile.get(t.profile_index) ?? 0) + 1);
    expect(Math.max(...perProfile.values())).toBeLessThan(fresh.length * 0.6);
  });

  it('releases them over the following hours and goes idle a day after the last real purchase', async () => {
    const lastReal = svc.clock.now();
    await runUntil(svc, lastReal + 24 * HOUR);
    const all = await decoys(svc, w.bot.bot_id);
    expect(all.filter((t) => t.status === 'planned')).toEqual([]);
    const count = all.length;
    expect(await events(svc, w.bot.bot_id, 'task.available')).toHaveLength(count);
    await runUntil(svc, lastReal + 96 * HOUR, HOUR);
    expect(await decoys(svc, w.bot.bot_id)).toHaveLength(count);
  });

  it('a real purchase older than a day when the engine sees it gets no late decoys (no burst after downtime)', async () => {
    const before = (await decoys(svc, w.bot.bot_id)).length;
    const res = await checkout(svc, w.bot, purchase(w.card.real_profile_index, 999));
    expect(res.statusCode).toBe(200);
    svc.clock.advance(25 * HOUR);
    await tick(svc);
    expect(await decoys(svc, w.bot.bot_id)).toHaveLength(before);
  });
});

describe('decoy tasks through the checkout chain', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
  });
  afterAll(async () => {
    await svc.close();
  });

  async function releasedDecoy(w: World) {
    await tick(svc);
    const planned = await decoys(svc, w.bot.bot_id);
    svc.clock.set(Math.max(...planned.map((t) => new Date(t.due_at).getTime())));
    await tick(svc);
    const task = await nextTask(svc, w.bot);
    expect(task.has_task).toBe(true);
    return task as Required<typeof task>;
  }

  it('an approved decoy fulfils its task and moves no money', async () => {
    const w = await world(svc, { patch: { ...bigLimits, ...autoApprove }, fundCents: 100_000 });
    const task = await releasedDecoy(w);
    expect(task.instructions.profile_index).not.toBe(w.card.real_profile_index);
    const res = await checkout(svc, w.bot, { ...task.instructions, task_id: task.task_id });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().missing_digits).toMatch(/^\d{3}$/);
    expect((await taskRow(svc, task.task_id)).status).toBe('fulfilled');
    expect(await wallet(svc, w.bot.bot_id)).toMatchObject({ available_cents: 100_000, held_cents: 0 });
    const ledger = await svc.ctx.db.query('SELECT * FROM ledger_entries WHERE bot_id = $1', [w.bot.bot_id]);
    expect(ledger.length).toBeGreaterThan(0); // the funding only
    await expectLedgerConsistent(svc, w.bot.bot_id);
  });

  it('a held decoy is decided by the service at its planned time, and the task follows', async () => {
    const w = await world(svc, { patch: bigLimits, fundCents: 100_000 });
    const task = await releasedDecoy(w);
    const res = await checkout(svc, w.bot, { ...task.instructions, task_id: task.task_id });
    expect(res.statusCode, res.body).toBe(202);
    expect((await taskRow(svc, task.task_id)).status).toBe('in_checkout');
    svc.clock.advance(16 * MINUTE);
    await processDueConfirmations(svc.ctx);
    const c = (
      await svc.ctx.db.query<{ status: string }>('SELECT status FROM checkout_confirmations WHERE id = $1', [
        res.json().confirmation_id,
      ])
    )[0]!;
    expect(['approved', 'denied', 'expired']).toContain(c.status);
    expect((await taskRow(svc, task.task_id)).status).toBe(c.status === 'approved' ? 'fulfilled' : 'failed');
    expect(await wallet(svc, w.bot.bot_id)).toMatchObject({ available_cents: 100_000, held_cents: 0 });
  });

  it('planned decoys of a card frozen meanwhile lapse instead of appearing', async () => {
    const w = await world(svc, { patch: bigLimits });
    await tick(svc);
    const planned = await decoys(svc, w.bot.bot_id);
    expect(planned.length).toBe(WARMUP_SLOTS);
    await patchCard(svc, w.owner, w.bot.bot_id, w.card.card_id, { status: 'frozen' });
    svc.clock.set(Math.max(...planned.map((t) => new Date(t.due_at).getTime())));
    await tick(svc);
    expect((await decoys(svc, w.bot.bot_id)).map((t) => t.status)).toEqual(
      Array(WARMUP_SLOTS).fill('expired'),
    );
    expect(await events(svc, w.bot.bot_id, 'task.available')).toHaveLength(0);
  });

  it('decoy merchant URLs lead to product pages of the shops, at the price of the task', async () => {
    const w = await world(svc, { patch: bigLimits });
    const task = await releasedDecoy(w);
    const url = new URL(task.instructions.merchant_url as string);
    const page = await svc.app.inject({ url: url.pathname });
    expect(page.statusCode).toBe(200);
    expect(page.body).toContain(`$${((task.instructions.amount_cents as number) / 100).toFixed(2)}`);
    expect(page.body).toContain(html(task.instructions.item_name as string));
    expect(SHOPS.map((s) => s.name)).toContain(task.instructions.merchant_name);
  });
});

describe.runIf(isPostgres)('decoy planning with racing engine ticks (PostgreSQL)', () => {
  it('several concurrent ticks plan the warm-up exactly once', async () => {
    const svc = await createTestService();
    try {
      const w = await world(svc, { patch: bigLimits });
      const results = await Promise.all(Array.from({ length: 6 }, () => runTasksOnce(svc.ctx)));
      expect(results.filter((r) => r.leader).length).toBeGreaterThanOrEqual(1);
      expect(results.some((r) => !r.leader)).toBe(true);
      await tick(svc);
      expect(await decoys(svc, w.bot.bot_id)).toHaveLength(WARMUP_SLOTS);
    } finally {
      await svc.close();
    }
  });
});

describe('decoy content', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('stays within default card limits and a quarter of the profile allowance, on the shops', () => {
    const card = { id: 'card_aaaaaaaaaaaaaaaa', per_transaction_cents: 500, daily_cents: 1000 };
    const indexes = [1, 2, 4, 5, 6];
    const weights = decoyProfileWeights(svc.ctx, card.id, indexes);
    expect([...weights].sort()).toEqual([1, 1, 6, 6, 6]);
    const allowances = new Map(indexes.map((i) => [i, i === 6 ? 1200 : 5000]));
    for (let n = 0; n < 500; n++) {
      const c = decoyContent(svc.ctx, card, indexes, weights, [], allowances);
      expect(indexes).toContain(c.profileIndex);
      expect(c.amountCents).toBeLessThanOrEqual(c.profileIndex === 6 ? 300 : 500);
      expect(c.shop.products.map((x) => x.priceCents)).toContain(c.amountCents);
      expect(c.merchantUrl.startsWith(`${svc.ctx.config.decoyShopBaseUrl}/merchant/${c.shop.slug}/`)).toBe(
        true,
      );
      expect(c.category).toBe(c.shop.categories[0]);
    }
  });

  it("keeps a real category no shop sells in, as written, on some shop's item", () => {
    const card = { id: 'card_cccccccccccccccc', per_transaction_cents: 100_000, daily_cents: 1_000_000 };
    const history = [{ created_at: new Date(), amount_cents: 2000, category: 'General Supplies' }];
    for (let n = 0; n < 50; n++) {
      const c = decoyContent(svc.ctx, card, [1, 2], [1, 1], history);
      expect(c.category).toBe('General Supplies');
      expect(SHOPS).toContain(c.shop);
    }
  });

  it("follows the real purchases' category and amounts when there is history", () => {
    const card = { id: 'card_bbbbbbbbbbbbbbbb', per_transaction_cents: 100_000, daily_cents: 1_000_000 };
    const history = [{ created_at: new Date(), amount_cents: 2500, category: 'Electronics' }];
    const amounts: number[] = [];
    for (let n = 0; n < 200; n++) {
      const c = decoyContent(svc.ctx, card, [1, 2], [1, 1], history);
      expect(c.category).toBe('Electronics');
      expect(shopsForCategory('electronics')).toContain(c.shop);
      amounts.push(c.amountCents);
    }
    const mean = amounts.reduce((a, b) => a + b, 0) / amounts.length;
    expect(mean).toBeGreaterThan(1500);
    expect(mean).toBeLessThan(3500);
  });
});
