import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_JOBS } from '../../src/jobs/index.ts';
import { createTestService, type TestService, testConfig } from '../support/service.ts';

// Wiring of the tasks module: its routes in /openapi.json with the right security, its job in the
// job list, and its configuration.
// The authentication checks for these routes (401 without a key, wrong kind of key, another
// owner's bot is 404) run in the shared table of test/foundation/auth.test.ts over every route.
const TASK_ROUTES = [
  'POST /api/v1/bot/tasks/next',
  'POST /api/v1/owner/bots/{bot_id}/schedules',
  'GET /api/v1/owner/bots/{bot_id}/schedules',
  'GET /api/v1/owner/bots/{bot_id}/tasks',
  'POST /api/v1/owner/bots/{bot_id}/schedules/{schedule_id}/pause',
  'POST /api/v1/owner/bots/{bot_id}/schedules/{schedule_id}/resume',
  'DELETE /api/v1/owner/bots/{bot_id}/schedules/{schedule_id}',
];

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService();
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
    expect(routes.sort()).toEqual([...TASK_ROUTES].sort());
    expect(Object.keys(doc.paths).some((p) => p.startsWith('/merchant'))).toBe(false);
  });

  it('runs the task engine on the scheduler role', () => {
    const job = ALL_JOBS.find((j) => j.name === 'tasks-engine');
    expect(job?.role).toBe('scheduler');
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
