import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processDueConfirmations } from '../../src/spend/holds.ts';
import { ownerMailSettled } from '../../src/notifications/job.ts';
import { LEASE_MS, NO_TASK_MESSAGE, TASK_LIFETIME_MS } from '../../src/tasks/service.ts';
import { checkout, events, expectLedgerConsistent, setupCard, wallet } from '../checkout/helpers.ts';
import { isPostgres } from '../support/db.ts';
import { createTestService, type TestService } from '../support/service.ts';
import {
  autoApprove,
  createSchedule,
  HOUR,
  MINUTE,
  nextTask,
  scheduleBody,
  taskRow,
  tick,
  type World,
  world,
} from './helpers.ts';

// The next-task endpoint and how a checkout with task_id moves a task. Tasks here come from owner
// schedules (decoy profiles disabled), produced by the engine on a fake clock.

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
});
afterAll(async () => {
  await svc.close();
});

/** A world with an hourly schedule whose first task is produced now; returns it and the task. */
async function worldWithTask(patch: Record<string, unknown> = {}, ins: Record<string, unknown> = {}) {
  const w = await world(svc, { decoys: false, patch });
  const created = await createSchedule(svc, w, scheduleBody(w.card, {}, ins));
  expect(created.statusCode, created.body).toBe(201);
  const due = Date.parse(created.json().next_run_at);
  svc.clock.set(due);
  expect((await tick(svc)).scheduled).toBeGreaterThanOrEqual(1);
  const task = await nextTask(svc, w.bot);
  expect(task.has_task).toBe(true);
  return { w, task: task as Required<typeof task>, scheduleId: created.json().schedule_id as string };
}

function fromTask(task: { task_id?: string; instructions?: Record<string, unknown> }) {
  return { ...task.instructions, task_id: task.task_id };
}

async function snapshot(w: World) {
  const c = await svc.ctx.db.query(
    'SELECT count(*)::int AS n FROM checkout_confirmations WHERE bot_id = $1',
    [w.bot.bot_id],
  );
  const t = await svc.ctx.db.query(
    'SELECT id, status, confirmation_id FROM tasks WHERE bot_id = $1 ORDER BY id',
    [w.bot.bot_id],
  );
  return { confirmations: c, tasks: t, wallet: await wallet(svc, w.bot.bot_id) };
}

describe('POST /api/v1/bot/tasks/next', () => {
  it('answers has_task false with only a message when there is nothing to do', async () => {
    const w = await world(svc, { decoys: false });
    const res = await svc.app.inject({ method: 'POST', url: '/api/v1/bot/tasks/next', headers: w.bot.auth });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ has_task: false, message: NO_TASK_MESSAGE });
  });

  it('takes no body: an empty or JSON body declared as JSON is fine, malformed JSON is 400', async () => {
    const w = await world(svc, { decoys: false });
    const send = (payload: string | undefined, contentType?: string) =>
      svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/tasks/next',
        headers: { ...w.bot.auth, ...(contentType ? { 'content-type': contentType } : {}) },
        ...(payload === undefined ? {} : { payload }),
      });
    for (const [payload, type] of [
      [undefined, undefined],
      ['', 'application/json'],
      ['{}', 'application/json'],
      ['{"anything": 1}', 'application/json; charset=utf-8'],
    ] as const) {
      const res = await send(payload, type);
      expect(res.statusCode, `${type} ${payload}`).toBe(200);
      expect(res.json().has_task).toBe(false);
    }
    const bad = await send('{nope', 'application/json');
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error).toBe('validation_error');
    const huge = await send(JSON.stringify({ pad: 'x'.repeat(1_100_000) }), 'application/json');
    expect(huge.statusCode).toBe(413);
  });

  it('needs the API key (401) and never shows another bot its tasks', async () => {
    const res = await svc.app.inject({ method: 'POST', url: '/api/v1/bot/tasks/next' });
    expect(res.statusCode).toBe(401);
    expect(res.json().error).toBe('Authentication required');
    const bad = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bot/tasks/next',
      headers: { authorization: `Bearer svc_live_${'0'.repeat(48)}` },
    });
    expect(bad.statusCode).toBe(401);
    const { w } = await worldWithTask();
    const other = await world(svc, { decoys: false });
    expect((await nextTask(svc, other.bot)).has_task).toBe(false);
    expect((await nextTask(svc, w.bot)).has_task).toBe(true);
  });

  it('hands out a produced task in the documented shape and emits task.available', async () => {
    const { w, task } = await worldWithTask();
    expect(Object.keys(task).sort()).toEqual(['has_task', 'instructions', 'message', 'task_id', 'task_type']);
    expect(task.task_type).toBe('purchase');
    expect(task.task_id).toMatch(/^task_[a-z2-7]{16}$/);
    expect(task.instructions).toEqual({
      profile_index: w.card.real_profile_index,
      merchant_name: 'Corner Coffee Roasters',
      merchant_url: 'https://corner-coffee.example.com/beans/house-blend',
      item_name: 'House blend 250 g',
      amount_cents: 350,
      category: 'groceries',
    });
    expect(task.message).toContain('task_id');
    const available = await events(svc, w.bot.bot_id, 'task.available');
    expect(available).toHaveLength(1);
    expect(available[0]!.data).toMatchObject({ task_id: task.task_id, task_type: 'purchase' });
  });

  it('keeps returning the leased task, hands it out again after the lease lapses, then lets it expire', async () => {
    const { w, task } = await worldWithTask();
    const first = await taskRow(svc, task.task_id);
    expect(new Date(first.leased_until as Date).getTime()).toBe(svc.clock.now() + LEASE_MS);
    svc.clock.advance(59 * MINUTE);
    expect((await nextTask(svc, w.bot)).task_id).toBe(task.task_id);
    // Asking again does not extend the lease.
    expect(new Date((await taskRow(svc, task.task_id)).leased_until as Date).getTime()).toBe(
      new Date(first.leased_until as Date).getTime(),
    );
    svc.clock.advance(2 * MINUTE); // lease lapsed: available again, and handed out again with a new lease
    expect((await nextTask(svc, w.bot)).task_id).toBe(task.task_id);
    const again = await taskRow(svc, task.task_id);
    expect(new Date(again.leased_until as Date).getTime()).toBe(svc.clock.now() + LEASE_MS);

    // Its lifetime ends while leased: it stays usable until the lease lapses, then expires.
    const availableAt = new Date(first.available_at as Date).getTime();
    svc.clock.set(availableAt + TASK_LIFETIME_MS - 30 * MINUTE);
    expect((await nextTask(svc, w.bot)).task_id).toBe(task.task_id);
    svc.clock.set(availableAt + TASK_LIFETIME_MS + MINUTE);
    await tick(svc);
    expect((await taskRow(svc, task.task_id)).status).toBe('available');
    svc.clock.set(availableAt + TASK_LIFETIME_MS + 31 * MINUTE);
    await tick(svc);
    expect((await taskRow(svc, task.task_id)).status).toBe('expired');
    const after = await nextTask(svc, w.bot);
    expect(after.task_id === task.task_id).toBe(false);
    const res = await checkout(svc, w.bot, fromTask(task));
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ error: 'validation_error', field: 'task_id' });
  });

  it('hands out the oldest task first and moves on once it is fulfilled', async () => {
    const { w, task } = await worldWithTask(autoApprove);
    svc.clock.advance(HOUR);
    await tick(svc);
    const open = await svc.ctx.db.query("SELECT id FROM tasks WHERE bot_id = $1 AND status = 'available'", [
      w.bot.bot_id,
    ]);
    expect(open).toHaveLength(2);
    expect((await nextTask(svc, w.bot)).task_id).toBe(task.task_id);
    const res = await checkout(svc, w.bot, fromTask(task));
    expect(res.statusCode, res.body).toBe(200);
    expect((await taskRow(svc, task.task_id)).status).toBe('fulfilled');
    expect((await taskRow(svc, task.task_id)).confirmation_id).toBe(res.json().confirmation_id);
    const second = await nextTask(svc, w.bot);
    expect(second.has_task).toBe(true);
    expect(second.task_id).not.toBe(task.task_id);
    // A fulfilled task cannot be used again.
    const reuse = await checkout(svc, w.bot, fromTask(task));
    expect(reuse.statusCode).toBe(400);
    expect(reuse.json()).toMatchObject({ error: 'validation_error', field: 'task_id' });
    expect(reuse.json().message).toContain('fulfilled');
    await expectLedgerConsistent(svc, w.bot.bot_id);
  });

  it('includes card_id in the instructions when the bot has several active cards', async () => {
    const { w, task } = await worldWithTask();
    expect(task.instructions.card_id).toBeUndefined();
    await setupCard(svc, w.owner, w.bot.bot_id);
    const again = await nextTask(svc, w.bot);
    expect(again.instructions?.card_id).toBe(w.card.card_id);
    // The SDK's way, checkout({...instructions, task_id}), works unchanged.
    const res = await checkout(svc, w.bot, fromTask(again));
    expect(res.statusCode, res.body).toBe(200);
  });
});

describe('checkout with task_id', () => {
  const cases: Array<[string, (ins: Record<string, unknown>) => Record<string, unknown>]> = [
    ['profile_index', (ins) => ({ profile_index: ((ins.profile_index as number) % 6) + 1 })],
    ['merchant_name', () => ({ merchant_name: 'Someone Else' })],
    ['merchant_url', () => ({ merchant_url: 'https://elsewhere.example.com/' })],
    ['amount_cents', (ins) => ({ amount_cents: (ins.amount_cents as number) + 1 })],
  ];

  it.each(cases)(
    'a different %s is 400 validation_error naming it, and changes nothing',
    async (field, change) => {
      const { w, task } = await worldWithTask(autoApprove);
      // Make every profile usable so only the task check can refuse the request.
      for (let i = 1; i <= 6; i++) {
        await svc.app.inject({
          method: 'PUT',
          url: `/api/v1/owner/bots/${w.bot.bot_id}/cards/${w.card.card_id}/profiles/${i}`,
          headers: w.owner.auth,
          payload: { enabled: true },
        });
      }
      const before = await snapshot(w);
      const res = await checkout(svc, w.bot, { ...fromTask(task), ...change(task.instructions) });
      expect(res.statusCode, res.body).toBe(400);
      const body = res.json();
      expect(body.error).toBe('validation_error');
      expect(body.field).toBe(field);
      expect(body.message).toContain(field);
      expect(body.mismatches.map((m: { field: string }) => m.field)).toEqual([field]);
      expect(await snapshot(w)).toEqual(before);
    },
  );

  it("another card, another bot's task, an unknown task: 400 naming the field, nothing changes", async () => {
    const { w, task } = await worldWithTask(autoApprove);
    const second = await setupCard(svc, w.owner, w.bot.bot_id, autoApprove);
    const stranger = await worldWithTask(autoApprove);
    const before = await snapshot(w);
    const otherCard = await checkout(svc, w.bot, {
      ...fromTask(task),
      card_id: second.card_id,
      profile_index: second.real_profile_index,
    });
    expect(otherCard.statusCode).toBe(400);
    expect(otherCard.json().mismatches.map((m: { field: string }) => m.field)).toContain('card_id');

    const foreign = await checkout(svc, stranger.w.bot, {
      ...fromTask(task),
      profile_index: stranger.w.card.real_profile_index,
    });
    expect(foreign.statusCode).toBe(400);
    expect(foreign.json()).toMatchObject({ error: 'validation_error', field: 'task_id' });
    const unknown = await checkout(svc, w.bot, {
      ...fromTask(task),
      card_id: w.card.card_id,
      task_id: 'task_aaaaaaaaaaaaaaaa',
    });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json()).toMatchObject({ error: 'validation_error', field: 'task_id' });
    expect(await snapshot(w)).toEqual(before);
    expect((await taskRow(svc, stranger.task.task_id)).status).toBe('available');
  });

  it('a task checkout is approved by its schedule, even when the card asks for everything', async () => {
    // The owner approved the schedule; its tasks, and its shadows' alike, are not asked again
    // (docs/tasks.md): no hold, no mail, the task fulfilled at once, the guardrails still applied.
    const { w, task } = await worldWithTask({ approval_mode: 'ask_for_everything' });
    await ownerMailSettled(svc.ctx);
    const mailsBefore = svc.mailer.sent.length;
    const res = await checkout(svc, w.bot, fromTask(task));
    expect(res.statusCode, res.body).toBe(200);
    expect(await taskRow(svc, task.task_id)).toMatchObject({
      status: 'fulfilled',
      confirmation_id: res.json().confirmation_id,
    });
    expect(await wallet(svc, w.bot.bot_id)).toMatchObject({
      available_micros: (10_000 - 350) * 10_000,
      held_micros: 0,
    });
    await ownerMailSettled(svc.ctx);
    expect(svc.mailer.sent.length).toBe(mailsBefore);
    const twice = await checkout(svc, w.bot, fromTask(task));
    expect(twice.statusCode).toBe(400);
    expect(twice.json().field).toBe('task_id');
  });

  /**
   * A task whose checkout the previous version held for the owner (in_checkout): made here as
   * that version left it, a held checkout linked to the task afterwards.
   */
  async function parkedTask() {
    const { w, task } = await worldWithTask({ approval_mode: 'ask_for_everything' });
    const { task_id: _id, ...plain } = fromTask(task);
    const res = await checkout(svc, w.bot, plain);
    expect(res.statusCode, res.body).toBe(202);
    const confirmation = res.json().confirmation_id as string;
    await svc.ctx.db.query('UPDATE checkout_confirmations SET task_id = $2 WHERE id = $1', [
      confirmation,
      task.task_id,
    ]);
    await svc.ctx.db.query(`UPDATE tasks SET status = 'in_checkout', confirmation_id = $2 WHERE id = $1`, [
      task.task_id,
      confirmation,
    ]);
    return { w, task, confirmation };
  }

  it('a task parked in_checkout by the previous version: not handed out again; owner approval fulfils it', async () => {
    const { w, task, confirmation } = await parkedTask();
    expect((await nextTask(svc, w.bot)).has_task).toBe(false);
    const twice = await checkout(svc, w.bot, fromTask(task));
    expect(twice.statusCode).toBe(400);
    expect(twice.json().field).toBe('task_id');
    const approve = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/approvals/${confirmation}/approve`,
      headers: w.owner.auth,
    });
    expect(approve.statusCode, approve.body).toBe(200);
    expect((await taskRow(svc, task.task_id)).status).toBe('fulfilled');
    expect((await wallet(svc, w.bot.bot_id)).available_micros).toBe((10_000 - 350) * 10_000);
  });

  it("a parked task fails on the owner's denial, which releases the hold", async () => {
    const { w, task, confirmation } = await parkedTask();
    const deny = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/approvals/${confirmation}/deny`,
      headers: w.owner.auth,
    });
    expect(deny.statusCode).toBe(200);
    expect((await taskRow(svc, task.task_id)).status).toBe('failed');
    expect(await wallet(svc, w.bot.bot_id)).toMatchObject({
      available_micros: 10_000 * 10_000,
      held_micros: 0,
    });
    expect((await nextTask(svc, w.bot)).has_task).toBe(false);
  });

  it('a parked task fails when the approval window expires', async () => {
    const { w, task } = await parkedTask();
    // The owner's mail about the held purchase is sent after the answer; while it marks the
    // confirmation mailed, the expiry claim (SKIP LOCKED) passes over it until its next round.
    await ownerMailSettled(svc.ctx);
    svc.clock.advance(15 * MINUTE + 1000);
    await processDueConfirmations(svc.ctx);
    expect((await taskRow(svc, task.task_id)).status).toBe('failed');
    expect(await wallet(svc, w.bot.bot_id)).toMatchObject({
      available_micros: 10_000 * 10_000,
      held_micros: 0,
    });
  });

  it('a refused checkout (guardrail) leaves the task open for another try', async () => {
    const { w, task } = await worldWithTask({ per_transaction_cents: 100 });
    const res = await checkout(svc, w.bot, fromTask(task));
    expect(res.statusCode).toBe(403);
    expect(res.json().error).toBe('card_guardrail_violation');
    expect((await taskRow(svc, task.task_id)).status).toBe('available');
    expect((await nextTask(svc, w.bot)).task_id).toBe(task.task_id);
  });

  it('two checkouts for one task at once: one goes through, the other is refused', async () => {
    const { w, task } = await worldWithTask(autoApprove);
    const [a, b] = await Promise.all([
      checkout(svc, w.bot, fromTask(task)),
      checkout(svc, w.bot, fromTask(task)),
    ]);
    expect([a.statusCode, b.statusCode].sort()).toEqual([200, 400]);
    expect((await wallet(svc, w.bot.bot_id)).available_micros).toBe((10_000 - 350) * 10_000);
    await expectLedgerConsistent(svc, w.bot.bot_id);
  });
});

describe.runIf(isPostgres)('next-task under concurrency (PostgreSQL)', () => {
  it('many simultaneous calls from one bot all get the same task, leased once', async () => {
    const { w, task } = await worldWithTask();
    svc.clock.advance(LEASE_MS + MINUTE); // lease lapsed: the next calls race to lease it again
    const leaseAt = svc.clock.now();
    const answers = await Promise.all(Array.from({ length: 12 }, () => nextTask(svc, w.bot)));
    expect(new Set(answers.map((a) => a.task_id))).toEqual(new Set([task.task_id]));
    const row = await taskRow(svc, task.task_id);
    expect(new Date(row.leased_until as Date).getTime()).toBe(leaseAt + LEASE_MS);
    expect(new Date(row.handed_out_at as Date).getTime()).toBe(leaseAt);
  });
});
