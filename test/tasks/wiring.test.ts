import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_JOBS } from '../../src/jobs/index.ts';
import { createTestService, type TestService, testConfig } from '../support/service.ts';
import { createSchedule, scheduleBody, type World, world } from './helpers.ts';

// Wiring of the tasks module: its routes in /openapi.json with the right security, its job in the
// job list, and the shared authentication checks (the same as test/foundation/auth.test.ts runs over
// every route; these samples are the entries that table needs for the routes added here).

const TASK_AUTH_SAMPLES: Record<string, { body?: Record<string, unknown> }> = {
  'POST /api/v1/bot/tasks/next': {},
  'POST /api/v1/owner/bots/{bot_id}/schedules': {
    body: {
      cron: '0 * * * *',
      timezone: 'UTC',
      instructions: {
        profile_index: 1,
        merchant_name: 'Shop',
        merchant_url: 'https://shop.example.com/item',
        item_name: 'Item',
        amount_cents: 100,
      },
    },
  },
  'GET /api/v1/owner/bots/{bot_id}/schedules': {},
  'GET /api/v1/owner/bots/{bot_id}/tasks': {},
  'POST /api/v1/owner/bots/{bot_id}/schedules/{schedule_id}/pause': {},
  'POST /api/v1/owner/bots/{bot_id}/schedules/{schedule_id}/resume': {},
  'DELETE /api/v1/owner/bots/{bot_id}/schedules/{schedule_id}': {},
};

/** The shared table's id fallback: `<name without _id>_aaaaaaaaaaaaaaaa`. */
function fill(path: string, botId: string): string {
  return path.replace(/\{(\w+)\}/g, (_m, name: string) =>
    name === 'bot_id' ? botId : `${name.replace(/_id$/, '')}_aaaaaaaaaaaaaaaa`,
  );
}

let svc: TestService;
let mine: World;
let theirs: World;
beforeAll(async () => {
  svc = await createTestService();
  mine = await world(svc);
  theirs = await world(svc);
  expect((await createSchedule(svc, theirs, scheduleBody(theirs.card))).statusCode).toBe(201);
});
afterAll(async () => {
  await svc.close();
});

describe('tasks wiring', () => {
  it('documents every task route in /openapi.json with its security, and no shop page', async () => {
    const doc = (await svc.app.inject({ url: '/openapi.json' })).json() as {
      paths: Record<string, Record<string, { security?: unknown }>>;
    };
    const routes: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        // API routes only: the dashboard's own pages (/bots/{bot_id}/schedules) are session-only HTML.
        if (path.startsWith('/api/') && /tasks|schedules/.test(path)) {
          routes.push(`${method.toUpperCase()} ${path}`);
          expect(op.security, path).toEqual(
            path.startsWith('/api/v1/bot/') ? [{ botKey: [] }] : [{ ownerToken: [] }],
          );
        }
      }
    }
    expect(routes.sort()).toEqual(Object.keys(TASK_AUTH_SAMPLES).sort());
    expect(Object.keys(doc.paths).some((p) => p.startsWith('/merchant'))).toBe(false);
  });

  it('runs the task engine on the scheduler role', () => {
    const job = ALL_JOBS.find((j) => j.name === 'tasks-engine');
    expect(job?.role).toBe('scheduler');
  });

  const badHeaders: Array<[string, Record<string, string>]> = [
    ['no header', {}],
    ['empty bearer', { authorization: 'Bearer ' }],
    ['malformed bot key', { authorization: 'Bearer svc_live_XYZ' }],
    ['unknown bot key', { authorization: `Bearer svc_live_${'0'.repeat(48)}` }],
    ['unknown owner token', { authorization: `Bearer svc_owner_${'0'.repeat(48)}` }],
  ];

  it.each(badHeaders)('401 Authentication required with %s', async (_name, headers) => {
    for (const [route, sample] of Object.entries(TASK_AUTH_SAMPLES)) {
      const [method, path] = route.split(' ') as [string, string];
      const res = await svc.app.inject({
        method: method as 'GET',
        url: fill(path, mine.bot.bot_id),
        headers,
        ...(sample.body ? { payload: sample.body } : {}),
      });
      expect(res.statusCode, route).toBe(401);
      expect(res.json().error).toBe('Authentication required');
    }
  });

  it("a bot key does not open owner routes, an owner token not the bot route; another owner's bot is 404", async () => {
    const snapshot = () =>
      svc.ctx.db.query('SELECT id, status, next_due_at FROM task_schedules WHERE bot_id = $1 ORDER BY id', [
        theirs.bot.bot_id,
      ]);
    const before = await snapshot();
    for (const [route, sample] of Object.entries(TASK_AUTH_SAMPLES)) {
      const [method, path] = route.split(' ') as [string, string];
      const wrong = path.startsWith('/api/v1/bot/') ? mine.owner.auth : mine.bot.auth;
      const res = await svc.app.inject({
        method: method as 'GET',
        url: fill(path, mine.bot.bot_id),
        headers: wrong,
        ...(sample.body ? { payload: sample.body } : {}),
      });
      expect(res.statusCode, route).toBe(401);
      if (!path.includes('{bot_id}')) continue;
      const foreign = await svc.app.inject({
        method: method as 'GET',
        url: fill(path, theirs.bot.bot_id),
        headers: mine.owner.auth,
        ...(sample.body ? { payload: sample.body } : {}),
      });
      expect(foreign.statusCode, route).toBe(404);
      expect(foreign.json().error).toBe('not_found');
    }
    expect(await snapshot()).toEqual(before);
  });
});

describe('DECOY_SHOP_BASE_URL', () => {
  it('defaults to BASE_URL, takes an http(s) URL without trailing slash, and names itself when wrong', () => {
    expect(testConfig({ BASE_URL: 'https://pay.example.org/' }).decoyShopBaseUrl).toBe(
      'https://pay.example.org',
    );
    expect(testConfig({ DECOY_SHOP_BASE_URL: 'https://shops.example.net/' }).decoyShopBaseUrl).toBe(
      'https://shops.example.net',
    );
    expect(() => testConfig({ DECOY_SHOP_BASE_URL: 'ftp://shops.example.net' })).toThrow(
      /DECOY_SHOP_BASE_URL/,
    );
    expect(() => testConfig({ DECOY_SHOP_BASE_URL: 'not a url' })).toThrow(/DECOY_SHOP_BASE_URL/);
  });
});
