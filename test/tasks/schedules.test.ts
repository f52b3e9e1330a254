import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import { runTasksOnce } from '../../src/tasks/engine.ts';
import { events, putProfile, setupCard } from '../checkout/helpers.ts';
import { createTestDatabase, isPostgres, POSTGRES_URL, type TestDatabase } from '../support/db.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { createSchedule, HOUR, MINUTE, scheduleBody, taskRows, tick, world } from './helpers.ts';

// Owner schedules: validation, pause/resume/delete, production of exactly one task per due time
// (also with two instances on one database), and catch-up after downtime.

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService();
});
afterAll(async () => {
  await svc.close();
});

async function scheduleCount(botId: string) {
  const rows = await svc.ctx.db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM task_schedules WHERE bot_id = $1',
    [botId],
  );
  return rows[0]!.n;
}

async function realTasks(botId: string) {
  return (await taskRows(svc, botId)).filter((t) => !t.is_decoy);
}

describe('POST /api/v1/owner/bots/{bot_id}/schedules', () => {
  it('creates a schedule (201) with its next run in the given time zone', async () => {
    const w = await world(svc, { decoys: false });
    svc.clock.set(Date.UTC(2026, 0, 5, 12, 0, 0));
    const res = await createSchedule(
      svc,
      w,
      scheduleBody(w.card, { cron: '30 9 * * 1-5', timezone: 'Europe/Berlin' }, { category: undefined }),
    );
    expect(res.statusCode, res.body).toBe(201);
    const body = res.json();
    expect(body.schedule_id).toMatch(/^schedule_[a-z2-7]{16}$/);
    expect(body).toMatchObject({
      bot_id: w.bot.bot_id,
      cron: '30 9 * * 1-5',
      timezone: 'Europe/Berlin',
      status: 'active',
      // Tuesday 6 January 2026, 09:30 in Berlin (UTC+1).
      next_run_at: '2026-01-06T08:30:00.000Z',
      last_run_at: null,
      instructions: {
        card_id: w.card.card_id,
        profile_index: w.card.real_profile_index,
        amount_cents: 350,
        category: 'general',
      },
    });
    const list = await svc.app.inject({
      url: `/api/v1/owner/bots/${w.bot.bot_id}/schedules`,
      headers: w.owner.auth,
    });
    expect(list.statusCode).toBe(200);
    expect(list.json().schedules).toEqual([body]);
  });

  const invalid: Array<[string, (card: { real_profile_index: number }) => Record<string, unknown>, string]> =
    [
      ['4-field cron', (c) => scheduleBody(c as never, { cron: '0 * * *' }), 'cron'],
      ['cron with seconds', (c) => scheduleBody(c as never, { cron: '0 0 * * * *' }), 'cron'],
      ['garbage cron', (c) => scheduleBody(c as never, { cron: 'every day' }), 'cron'],
      ['out-of-range cron', (c) => scheduleBody(c as never, { cron: '61 * * * *' }), 'cron'],
      ['cron that never fires', (c) => scheduleBody(c as never, { cron: '0 0 30 2 *' }), 'cron'],
      ['unknown time zone', (c) => scheduleBody(c as never, { timezone: 'Mars/Olympus' }), 'timezone'],
      [
        'profile_index 0',
        (c) => scheduleBody(c as never, {}, { profile_index: 0 }),
        'instructions.profile_index',
      ],
      [
        'profile_index 7',
        (c) => scheduleBody(c as never, {}, { profile_index: 7 }),
        'instructions.profile_index',
      ],
      ['amount 0', (c) => scheduleBody(c as never, {}, { amount_cents: 0 }), 'instructions.amount_cents'],
      [
        'fractional amount',
        (c) => scheduleBody(c as never, {}, { amount_cents: 1.5 }),
        'instructions.amount_cents',
      ],
      [
        'amount as text',
        (c) => scheduleBody(c as never, {}, { amount_cents: '350' }),
        'instructions.amount_cents',
      ],
      [
        'ftp merchant_url',
        (c) => scheduleBody(c as never, {}, { merchant_url: 'ftp://x.example/' }),
        'instructions.merchant_url',
      ],
      [
        'relative merchant_url',
        (c) => scheduleBody(c as never, {}, { merchant_url: '/shop' }),
        'instructions.merchant_url',
      ],
      [
        'blank merchant_name',
        (c) => scheduleBody(c as never, {}, { merchant_name: '   ' }),
        'instructions.merchant_name',
      ],
      ['unknown field', (c) => ({ ...scheduleBody(c as never), surprise: 1 }), ''],
      ['no instructions', () => ({ cron: '0 * * * *', timezone: 'UTC' }), ''],
      [
        'NUL in item_name',
        (c) => scheduleBody(c as never, {}, { item_name: 'a\u0000b' }),
        'instructions.item_name',
      ],
      ['NUL in timezone', (c) => scheduleBody(c as never, { timezone: 'UTC\u0000' }), 'timezone'],
    ];

  it.each(invalid)('%s: 400 validation_error, nothing stored', async (_name, body, field) => {
    const w = await world(svc, { decoys: false });
    const res = await createSchedule(svc, w, body(w.card));
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error).toBe('validation_error');
    if (field) expect(res.json().field).toBe(field);
    expect(await scheduleCount(w.bot.bot_id)).toBe(0);
  });

  it('checks the card and profile like a checkout: unknown card, several cards, no card, disabled profile, inactive card', async () => {
    const w = await world(svc, { decoys: false });
    const other = await world(svc, { decoys: false });
    const foreignCard = await createSchedule(
      svc,
      w,
      scheduleBody(w.card, {}, { card_id: other.card.card_id }),
    );
    expect(foreignCard.statusCode).toBe(404);
    expect(foreignCard.json().error).toBe('card_not_found');

    await putProfile(svc, w.owner, w.bot.bot_id, w.card.card_id, w.card.real_profile_index, {
      enabled: false,
    });
    const disabled = await createSchedule(svc, w, scheduleBody(w.card));
    expect(disabled.statusCode).toBe(400);
    expect(disabled.json().error).toBe('invalid_profile');

    await setupCard(svc, w.owner, w.bot.bot_id);
    const several = await createSchedule(svc, w, scheduleBody(w.card));
    expect(several.statusCode).toBe(400);
    expect(several.json().error).toBe('card_id_required');

    const owner = await createOwner(svc);
    const bare = await activeBot(svc, owner);
    const none = await createSchedule(svc, { owner, bot: bare }, scheduleBody(w.card));
    expect(none.statusCode).toBe(404);
    expect(none.json().error).toBe('card_not_found');

    const started = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bare.bot_id}/cards`,
      headers: owner.auth,
      payload: {},
    });
    const pending = await createSchedule(
      svc,
      { owner, bot: bare },
      scheduleBody(w.card, {}, { card_id: started.json().card_id, profile_index: 1 }),
    );
    expect(pending.statusCode).toBe(403);
    expect(pending.json().error).toBe('card_not_active');
    expect(await scheduleCount(w.bot.bot_id)).toBe(0);
    expect(await scheduleCount(bare.bot_id)).toBe(0);
  });

  it("401 without an owner token; another owner's bot or schedule is 404 on every route, and nothing changes", async () => {
    const w = await world(svc, { decoys: false });
    const mine = (await createSchedule(svc, w, scheduleBody(w.card))).json();
    const intruder = await createOwner(svc);
    const base = `/api/v1/owner/bots/${w.bot.bot_id}/schedules`;
    const routes: Array<[string, string, Record<string, unknown>?]> = [
      ['POST', base, scheduleBody(w.card)],
      ['GET', base],
      ['POST', `${base}/${mine.schedule_id}/pause`],
      ['POST', `${base}/${mine.schedule_id}/resume`],
      ['DELETE', `${base}/${mine.schedule_id}`],
    ];
    for (const [method, url, payload] of routes) {
      const anon = await svc.app.inject({ method: method as 'GET', url, ...(payload ? { payload } : {}) });
      expect(anon.statusCode, `${method} ${url}`).toBe(401);
      const botKey = await svc.app.inject({
        method: method as 'GET',
        url,
        headers: w.bot.auth,
        ...(payload ? { payload } : {}),
      });
      expect(botKey.statusCode).toBe(401);
      const foreign = await svc.app.inject({
        method: method as 'GET',
        url,
        headers: intruder.auth,
        ...(payload ? { payload } : {}),
      });
      expect(foreign.statusCode, `${method} ${url}`).toBe(404);
      expect(foreign.json().error).toBe('not_found');
    }
    // A schedule id under the owner's other bot is 404 too.
    const second = await activeBot(svc, w.owner);
    const crossed = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${second.bot_id}/schedules/${mine.schedule_id}/pause`,
      headers: w.owner.auth,
    });
    expect(crossed.statusCode).toBe(404);
    const unknown = await svc.app.inject({
      method: 'DELETE',
      url: `${base}/schedule_aaaaaaaaaaaaaaaa`,
      headers: w.owner.auth,
    });
    expect(unknown.statusCode).toBe(404);
    const malformed = await svc.app.inject({ method: 'DELETE', url: `${base}/nope`, headers: w.owner.auth });
    expect(malformed.statusCode).toBe(400);
    const list = await svc.app.inject({ url: base, headers: w.owner.auth });
    expect(list.json().schedules).toEqual([mine]);
  });
});

describe('producing scheduled tasks', () => {
  it('one task per due time, with task.available; a repeated tick adds nothing', async () => {
    const w = await world(svc, { decoys: false });
    const s = (await createSchedule(svc, w, scheduleBody(w.card))).json();
    svc.clock.set(Date.parse(s.next_run_at) - 1);
    await tick(svc);
    expect(await realTasks(w.bot.bot_id)).toHaveLength(0);
    svc.clock.advance(1);
    await tick(svc);
    await tick(svc);
    const tasks = await realTasks(w.bot.bot_id);
    expect(tasks).toHaveLength(1);
    expect(tasks[0]).toMatchObject({ status: 'available', schedule_id: s.schedule_id });
    expect(new Date(tasks[0]!.due_at).toISOString()).toBe(s.next_run_at);
    expect(await events(svc, w.bot.bot_id, 'task.available')).toHaveLength(1);
    const after = await svc.app.inject({
      url: `/api/v1/owner/bots/${w.bot.bot_id}/schedules`,
      headers: w.owner.auth,
    });
    expect(after.json().schedules[0]).toMatchObject({
      last_run_at: s.next_run_at,
      next_run_at: new Date(Date.parse(s.next_run_at) + HOUR).toISOString(),
    });
  });

  it('a due time already produced (unique key) is not produced again, and no second event is sent', async () => {
    const w = await world(svc, { decoys: false });
    const s = (await createSchedule(svc, w, scheduleBody(w.card))).json();
    const due = Date.parse(s.next_run_at);
    // As if another instance had produced it and crashed before moving the schedule on.
    await svc.ctx.db.query(
      `INSERT INTO tasks (id, bot_id, card_id, is_decoy, schedule_id, due_at, available_at, expires_at, profile_index,
         merchant_name, merchant_url, item_name, amount_micros, category, status, created_at)
       VALUES ('task_preexistingzzzzz', $1, $2, false, $3, $4, $4, $5, 1, 'm', 'https://m.example/', 'i', 10000, 'c', 'available', $4)`,
      [w.bot.bot_id, w.card.card_id, s.schedule_id, new Date(due), new Date(due + 86_400_000)],
    );
    svc.clock.set(due + MINUTE);
    await tick(svc);
    expect(await realTasks(w.bot.bot_id)).toHaveLength(1);
    expect(await events(svc, w.bot.bot_id, 'task.available')).toHaveLength(0);
  });

  it('after downtime only the latest missed occurrence is produced, once', async () => {
    const w = await world(svc, { decoys: false });
    const s = (await createSchedule(svc, w, scheduleBody(w.card, { cron: '*/5 * * * *' }))).json();
    const first = Date.parse(s.next_run_at);
    // Down for three days and a bit: 800+ occurrences missed.
    const back = first + 3 * 86_400_000 + 7 * MINUTE;
    svc.clock.set(back);
    await tick(svc);
    await tick(svc);
    const tasks = await realTasks(w.bot.bot_id);
    expect(tasks).toHaveLength(1);
    expect(new Date(tasks[0]!.due_at).getTime()).toBe(first + 3 * 86_400_000 + 5 * MINUTE);
    svc.clock.set(first + 3 * 86_400_000 + 10 * MINUTE);
    await tick(svc);
    expect(await realTasks(w.bot.bot_id)).toHaveLength(2);
  });

  it('catch-up for a sparse schedule finds the latest occurrence beyond the two-day look-back', async () => {
    const w = await world(svc, { decoys: false });
    svc.clock.set(Date.UTC(2026, 2, 2, 0, 0, 0));
    const s = (await createSchedule(svc, w, scheduleBody(w.card, { cron: '0 10 * * 1' }))).json();
    expect(s.next_run_at).toBe('2026-03-02T10:00:00.000Z'); // a Monday
    svc.clock.set(Date.UTC(2026, 2, 19, 12, 0, 0)); // Thursday, two and a half weeks later
    await tick(svc);
    const tasks = await realTasks(w.bot.bot_id);
    expect(tasks.map((t) => new Date(t.due_at).toISOString())).toEqual(['2026-03-16T10:00:00.000Z']);
  });

  it('a busy minute: every due schedule in three statements, and each bot gets its events in schedule order', async () => {
    /** Statements a tick runs inside its transaction. */
    const statementsOfTick = async () => {
      const db = svc.ctx.db;
      const transaction = db.transaction.bind(db);
      let n = 0;
      db.transaction = ((fn, options) =>
        transaction((tx) => {
          const query = tx.query.bind(tx);
          return fn({
            ...tx,
            exec: tx.exec.bind(tx),
            query: ((sql, params) => {
              n++;
              return query(sql, params);
            }) as typeof tx.query,
          });
        }, options)) as typeof db.transaction;
      try {
        await tick(svc);
      } finally {
        db.transaction = transaction;
      }
      return n;
    };
    svc.clock.set(Date.UTC(2026, 4, 4, 8, 0, 0));
    const one = await world(svc, { decoys: false });
    await createSchedule(svc, one, scheduleBody(one.card, { cron: '0 9 * * *' }));
    svc.clock.set(Date.UTC(2026, 4, 4, 9, 0, 30));
    const alone = await statementsOfTick();
    expect((await realTasks(one.bot.bot_id)).length).toBe(1);

    svc.clock.set(Date.UTC(2026, 4, 5, 8, 0, 0));
    const worlds = [];
    for (let i = 0; i < 8; i++) {
      const w = await world(svc, { decoys: false });
      for (const item of ['Beans', 'Filters', 'Mugs']) {
        const res = await createSchedule(
          svc,
          w,
          scheduleBody(w.card, { cron: '0 9 * * *' }, { item_name: item }),
        );
        expect(res.statusCode, res.body).toBe(201);
      }
      worlds.push(w);
    }
    svc.clock.set(Date.UTC(2026, 4, 5, 9, 0, 30));
    // 8 × 3 new schedules and the first world's second day: the same statements as one schedule.
    expect(await statementsOfTick()).toBe(alone);
    for (const w of worlds) {
      const tasks = (await realTasks(w.bot.bot_id)).sort((a, b) =>
        String(a.schedule_id) < String(b.schedule_id) ? -1 : 1,
      );
      expect(tasks.map((t) => t.item_name).sort()).toEqual(['Beans', 'Filters', 'Mugs']);
      const delivered = await svc.ctx.db.query<{ task_id: string }>(
        `SELECT body::jsonb -> 'data' ->> 'task_id' AS task_id FROM events
          WHERE bot_id = $1 AND type = 'task.available' ORDER BY seq`,
        [w.bot.bot_id],
      );
      expect(delivered.map((e) => e.task_id)).toEqual(tasks.map((t) => t.id));
    }
  });

  it('pause stops production, resume starts from the next occurrence (no catch-up), delete ends it', async () => {
    const w = await world(svc, { decoys: false });
    const s = (await createSchedule(svc, w, scheduleBody(w.card))).json();
    const base = `/api/v1/owner/bots/${w.bot.bot_id}/schedules/${s.schedule_id}`;
    const paused = await svc.app.inject({ method: 'POST', url: `${base}/pause`, headers: w.owner.auth });
    expect(paused.statusCode).toBe(200);
    expect(paused.json()).toMatchObject({ status: 'paused', next_run_at: null });
    svc.clock.set(Date.parse(s.next_run_at) + 3 * HOUR + 10 * MINUTE);
    await tick(svc);
    expect(await realTasks(w.bot.bot_id)).toHaveLength(0);
    const resumed = await svc.app.inject({ method: 'POST', url: `${base}/resume`, headers: w.owner.auth });
    expect(resumed.statusCode).toBe(200);
    expect(resumed.json().status).toBe('active');
    expect(Date.parse(resumed.json().next_run_at)).toBe(Date.parse(s.next_run_at) + 4 * HOUR);
    await tick(svc);
    expect(await realTasks(w.bot.bot_id)).toHaveLength(0);
    svc.clock.set(Date.parse(s.next_run_at) + 4 * HOUR);
    await tick(svc);
    expect(await realTasks(w.bot.bot_id)).toHaveLength(1);
    // Resuming an active schedule changes nothing.
    const again = await svc.app.inject({ method: 'POST', url: `${base}/resume`, headers: w.owner.auth });
    expect(again.json().next_run_at).toBe(new Date(Date.parse(s.next_run_at) + 5 * HOUR).toISOString());

    const deleted = await svc.app.inject({ method: 'DELETE', url: base, headers: w.owner.auth });
    expect(deleted.statusCode).toBe(200);
    expect(deleted.json().status).toBe('deleted');
    svc.clock.advance(5 * HOUR);
    await tick(svc);
    expect(await realTasks(w.bot.bot_id)).toHaveLength(1);
    const list = await svc.app.inject({
      url: `/api/v1/owner/bots/${w.bot.bot_id}/schedules`,
      headers: w.owner.auth,
    });
    expect(list.json().schedules).toEqual([]);
    expect(
      (await svc.app.inject({ method: 'POST', url: `${base}/resume`, headers: w.owner.auth })).statusCode,
    ).toBe(404);
  });
});

describe('limits and the owner task list', () => {
  it('a bot has at most 50 schedules (409 conflict beyond); deleting one makes room', async () => {
    const w = await world(svc, { decoys: false });
    const ids: string[] = [];
    for (let i = 0; i < 50; i++) {
      const res = await createSchedule(svc, w, scheduleBody(w.card, { cron: `${i % 60} 3 * * *` }));
      expect(res.statusCode).toBe(201);
      ids.push(res.json().schedule_id);
    }
    const over = await createSchedule(svc, w, scheduleBody(w.card));
    expect(over.statusCode).toBe(409);
    expect(over.json().error).toBe('conflict');
    expect(await scheduleCount(w.bot.bot_id)).toBe(50);
    await svc.app.inject({
      method: 'DELETE',
      url: `/api/v1/owner/bots/${w.bot.bot_id}/schedules/${ids[0]}`,
      headers: w.owner.auth,
    });
    expect((await createSchedule(svc, w, scheduleBody(w.card))).statusCode).toBe(201);
  });

  it("lists the bot's tasks for its owner, newest first, decoys marked; 404 for another owner", async () => {
    const w = await world(svc);
    const s = (await createSchedule(svc, w, scheduleBody(w.card))).json();
    // An hourly schedule leaves its shadows no room to move: all six are due together.
    svc.clock.set(Date.parse(s.next_run_at));
    await tick(svc);
    const res = await svc.app.inject({
      url: `/api/v1/owner/bots/${w.bot.bot_id}/tasks`,
      headers: w.owner.auth,
    });
    expect(res.statusCode).toBe(200);
    const tasks = res.json().tasks as Array<Record<string, unknown>>;
    // One decoy per shadow: the card's five other profiles.
    expect(tasks.filter((t) => t.kind === 'decoy')).toHaveLength(5);
    const scheduled = tasks.filter((t) => t.kind === 'scheduled');
    expect(scheduled.length).toBeGreaterThanOrEqual(1);
    expect(scheduled[0]).toMatchObject({ schedule_id: s.schedule_id, amount_usd: 3.5, status: 'available' });
    const times = tasks.map((t) => Date.parse(t.available_at as string));
    expect([...times].sort((a, b) => b - a)).toEqual(times);
    const limited = await svc.app.inject({
      url: `/api/v1/owner/bots/${w.bot.bot_id}/tasks?limit=2`,
      headers: w.owner.auth,
    });
    expect(limited.json().tasks).toHaveLength(2);
    const bad = await svc.app.inject({
      url: `/api/v1/owner/bots/${w.bot.bot_id}/tasks?limit=abc`,
      headers: w.owner.auth,
    });
    expect(bad.statusCode).toBe(400);
    const intruder = await createOwner(svc);
    const foreign = await svc.app.inject({
      url: `/api/v1/owner/bots/${w.bot.bot_id}/tasks`,
      headers: intruder.auth,
    });
    expect(foreign.statusCode).toBe(404);
  });
});

describe('two instances on one database', () => {
  let database: TestDatabase;
  let a: TestService;
  let b: TestService;
  beforeAll(async () => {
    database = await createTestDatabase();
    a = await createTestService({ database });
    // A second instance with its own pool (PostgreSQL); with PGlite one process owns the data, so
    // the second instance shares the handle and the test shows the same guarantees serially.
    if (isPostgres) {
      const db = await openPostgres({ connectionString: POSTGRES_URL, schema: database.schema!, max: 4 });
      b = await createTestService({ database: { db, drop: () => db.close() }, clock: a.clock });
    } else {
      b = await createTestService({ database, clock: a.clock });
    }
  });
  afterAll(async () => {
    await b.close();
    if (isPostgres) await b.database.drop();
    await a.close();
    await database.drop();
  });

  it('each due time produces exactly one task and one event, whichever instance ticks', async () => {
    const bots = [];
    for (let i = 0; i < 3; i++) {
      const w = await world(a, { decoys: false });
      const s = await createSchedule(a, w, scheduleBody(w.card, { cron: '*/10 * * * *' }));
      expect(s.statusCode).toBe(201);
      bots.push(w);
    }
    const start = a.clock.now();
    let leaders = 0;
    let followers = 0;
    for (let step = 1; step <= 36; step++) {
      a.clock.set(start + step * 5 * MINUTE);
      const results = await Promise.all([runTasksOnce(a.ctx), runTasksOnce(b.ctx), runTasksOnce(a.ctx)]);
      for (const r of results) r.leader ? leaders++ : followers++;
    }
    expect(leaders).toBeGreaterThanOrEqual(36);
    if (isPostgres) expect(followers).toBeGreaterThan(0);
    for (const w of bots) {
      const rows = await a.ctx.db.query<{ due_at: Date }>(
        'SELECT due_at FROM tasks WHERE bot_id = $1 AND NOT is_decoy ORDER BY due_at',
        [w.bot.bot_id],
      );
      const dues = rows.map((r) => new Date(r.due_at).getTime());
      expect(new Set(dues).size).toBe(dues.length);
      expect(dues.length).toBe(18);
      const evts = await a.ctx.db.query(
        "SELECT id FROM events WHERE bot_id = $1 AND type = 'task.available'",
        [w.bot.bot_id],
      );
      expect(evts).toHaveLength(18);
    }
  });
});
