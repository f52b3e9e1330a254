import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCron } from '../../src/tasks/cron.ts';
import { cronPeriod, SHADOW_WINDOW_MS, shadowOffsets } from '../../src/tasks/shadows.ts';
import { createTestService, type TestService } from '../support/service.ts';
import { createSchedule, HOUR, MINUTE, scheduleBody, tick, world } from './helpers.ts';

// Decoy tasks are shadows of the owner's schedules (src/tasks/shadows.ts): one hidden schedule per
// other enabled profile, moved by an offset drawn so that the owner's time is not the odd one out.

let svc: TestService;

beforeAll(async () => {
  svc = await createTestService();
});
afterAll(async () => {
  await svc.close();
});

async function tasksOf(botId: string) {
  return svc.ctx.db.query<{
    profile_index: number;
    due_at: Date;
    is_decoy: boolean;
    merchant_url: string;
    schedule_id: string;
  }>(
    'SELECT profile_index, due_at, is_decoy, merchant_url, schedule_id FROM tasks WHERE bot_id = $1 ORDER BY due_at',
    [botId],
  );
}

describe('decoy shadows of owner schedules', () => {
  it('no schedule, no decoy tasks: the engine never reacts to checkouts', async () => {
    const w = await world(svc, {
      patch: { approval_mode: 'auto_approve_under_threshold', approval_threshold_cents: 100_000 },
    });
    for (const i of [w.card.real_profile_index, w.card.decoyIndex, w.card.real_profile_index]) {
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/merchant/checkout',
        headers: w.bot.auth,
        payload: {
          profile_index: i,
          merchant_name: 'A',
          merchant_url: 'https://a.example/x',
          item_name: 'x',
          amount_cents: 100,
        },
      });
      expect(res.statusCode).toBe(200);
    }
    for (let h = 0; h < 72; h++) {
      svc.clock.advance(HOUR);
      await tick(svc);
    }
    expect(await tasksOf(w.bot.bot_id)).toHaveLength(0);
  });

  it('a daily schedule gets one hidden shadow per other profile; every profile is tasked once a day', async () => {
    const w = await world(svc);
    const s = (await createSchedule(svc, w, scheduleBody(w.card, { cron: '0 9 * * *' }))).json();
    // The owner sees only their schedule.
    const list = await svc.app.inject({
      url: `/api/v1/owner/bots/${w.bot.bot_id}/schedules`,
      headers: w.owner.auth,
    });
    expect(list.json().schedules.map((x: { schedule_id: string }) => x.schedule_id)).toEqual([s.schedule_id]);
    const shadows = await svc.ctx.db.query<{
      instructions: { profile_index: number; merchant_url: string };
      shadow_offset_ms: number;
    }>('SELECT instructions, shadow_offset_ms FROM task_schedules WHERE shadow_of = $1', [s.schedule_id]);
    expect(shadows.map((x) => x.instructions.profile_index).sort()).toEqual(
      [1, 2, 3, 4, 5, 6].filter((i) => i !== w.card.real_profile_index),
    );
    // Whole hours (the owner's minute is kept), within the window, from distinct shops.
    for (const x of shadows) {
      expect(Math.abs(Number(x.shadow_offset_ms)) % HOUR).toBe(0);
      expect(Math.abs(Number(x.shadow_offset_ms))).toBeLessThanOrEqual(SHADOW_WINDOW_MS);
      expect(x.instructions.merchant_url).toMatch(/^http:\/\/localhost:8080\/merchant\//);
    }
    expect(
      new Set(shadows.map((x) => new URL(x.instructions.merchant_url).pathname.split('/')[2])).size,
    ).toBe(5);
    for (let h = 0; h < 48; h++) {
      svc.clock.advance(HOUR);
      await tick(svc);
    }
    const tasks = await tasksOf(w.bot.bot_id);
    const perProfile = [1, 2, 3, 4, 5, 6].map((i) => tasks.filter((t) => t.profile_index === i).length);
    expect(Math.min(...perProfile)).toBeGreaterThanOrEqual(1);
    expect(Math.max(...perProfile) - Math.min(...perProfile)).toBeLessThanOrEqual(1);
    // Decoy tasks never name the real profile; the real one is the owner's.
    for (const t of tasks) expect(t.is_decoy).toBe(t.profile_index !== w.card.real_profile_index);
    // task.available for each, alike.
    const events = await svc.ctx.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM events WHERE bot_id = $1 AND type = 'task.available'`,
      [w.bot.bot_id],
    );
    expect(events[0]!.n).toBe(tasks.length);
  });

  it('shadows follow pause, resume and delete', async () => {
    const w = await world(svc);
    const s = (await createSchedule(svc, w, scheduleBody(w.card, { cron: '*/30 * * * *' }))).json();
    const change = (action: string) =>
      svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${w.bot.bot_id}/schedules/${s.schedule_id}/${action}`,
        headers: w.owner.auth,
      });
    const statuses = async () =>
      (
        await svc.ctx.db.query<{ status: string }>(
          'SELECT DISTINCT status FROM task_schedules WHERE shadow_of = $1',
          [s.schedule_id],
        )
      ).map((r) => r.status);
    expect((await change('pause')).statusCode).toBe(200);
    expect(await statuses()).toEqual(['paused']);
    svc.clock.advance(2 * HOUR);
    await tick(svc);
    expect(await tasksOf(w.bot.bot_id)).toHaveLength(0);
    expect((await change('resume')).statusCode).toBe(200);
    expect(await statuses()).toEqual(['active']);
    svc.clock.advance(31 * MINUTE);
    await tick(svc);
    expect((await tasksOf(w.bot.bot_id)).length).toBe(6);
    const del = await svc.app.inject({
      method: 'DELETE',
      url: `/api/v1/owner/bots/${w.bot.bot_id}/schedules/${s.schedule_id}`,
      headers: w.owner.auth,
    });
    expect(del.statusCode).toBe(200);
    expect(await statuses()).toEqual(['deleted']);
  });

  it('offsets: the owner’s zero is one draw among six from the same window', () => {
    // Over many draws, the owner's offset (0) is the earliest, the latest or the middle one of the
    // six as often as any shadow's.
    let earliest = 0;
    let latest = 0;
    const trials = 20_000;
    for (let k = 0; k < trials; k++) {
      const all = [0, ...shadowOffsets(24 * HOUR, 5)];
      const min = Math.min(...all);
      const max = Math.max(...all);
      earliest += all[0] === min ? 1 / all.filter((x) => x === min).length : 0;
      latest += all[0] === max ? 1 / all.filter((x) => x === max).length : 0;
    }
    expect(earliest / trials).toBeGreaterThan(0.15);
    expect(earliest / trials).toBeLessThan(0.18);
    expect(latest / trials).toBeGreaterThan(0.15);
    expect(latest / trials).toBeLessThan(0.18);
    // Schedules that fire more than once a day keep the owner's times.
    expect(cronPeriod(parseCron('*/15 * * * *', 'UTC'), Date.UTC(2026, 0, 5))).toBe(15 * MINUTE);
    expect(cronPeriod(parseCron('0 */6 * * *', 'UTC'), Date.UTC(2026, 0, 5))).toBe(6 * HOUR);
    for (let k = 0; k < 100; k++) expect(shadowOffsets(6 * HOUR, 5)).toEqual([0, 0, 0, 0, 0]);
    expect(cronPeriod(parseCron('7 9 * * 1-5', 'UTC'), Date.UTC(2026, 0, 5))).toBe(24 * HOUR);
  });
});
