import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOT_TOOLS } from '../../packages/mcp/src/tools.ts';
import { renderSkill, SKILL_FILE } from '../../src/mcp/skill.ts';
import { ERROR_STATUS, type ErrorCode } from '../../src/platform/errors.ts';
import { createTestService, type TestService } from '../support/service.ts';

// The skill file for agents (docs/skill.md, served at /skill.md) checked against the service's own
// OpenAPI document and error table, so it cannot drift: every route it names exists with that
// method, every bot route is in it, every error code it lists exists with that HTTP status, and
// every code a bot can receive is listed with what to do.

/** Codes a bot never receives from its API, and why (a new code must go in the skill file or here). */
const NOT_FOR_BOTS: Partial<Record<ErrorCode, string>> = {
  invalid_claim_token: 'owner claims',
  forbidden: 'owner and dashboard',
  csrf_failed: 'dashboard forms',
  already_claimed: 'owner claims',
  not_pending: 'owner decisions on approvals and top-ups',
  conflict: 'owner settings (tunnels, schedules, partner wallet keys)',
  rail_not_configured: 'owner turning on the partner wallet',
  possible_same_card: 'owner activating a card',
  method_not_allowed: 'tunnel hostnames (answered to the webhook sender, not to bot API calls)',
  upgrade_required: 'the tunnel client’s WebSocket connect',
  not_implemented: 'not answered by any bot route',
  tunnel_not_connected: 'tunnel hostnames',
  tunnel_upstream_error: 'tunnel hostnames',
  tunnel_timeout: 'tunnel hostnames',
};

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

interface OpenApi {
  paths: Record<string, Partial<Record<(typeof METHODS)[number], { responses?: Record<string, unknown> }>>>;
}

describe('the skill file for agents', () => {
  let svc: TestService;
  let openapi: OpenApi;
  const template = readFileSync(SKILL_FILE, 'utf8');

  beforeAll(async () => {
    svc = await createTestService({ env: { BASE_URL: 'https://pay.example.com' } });
    openapi = (await svc.app.inject({ url: '/openapi.json' })).json();
  });
  afterAll(async () => {
    await svc.close();
  });

  const botRoutes = () =>
    Object.entries(openapi.paths).flatMap(([path, ops]) =>
      path.startsWith('/api/v1/bot/') || path === '/api/v1/bots/register'
        ? METHODS.filter((m) => ops[m]).map((m) => ({ method: m.toUpperCase(), path }))
        : [],
    );

  it('is served at /skill.md as Markdown with this service’s address filled in', async () => {
    const res = await svc.app.inject({ url: '/skill.md' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/markdown/);
    expect(res.body).toBe(renderSkill(template, 'https://pay.example.com'));
    expect(res.body).not.toContain('{{BASE_URL}}');
    expect(res.body).toContain('curl -s https://pay.example.com/api/v1/bot/status');
    // Not an API route: it stays out of the OpenAPI document.
    expect(openapi.paths['/skill.md']).toBeUndefined();
  });

  it('names only routes that exist, each with a method the route has', () => {
    const mentioned = [...template.matchAll(/\/api\/v1\/[A-Za-z0-9_\-/{}]+/g)].map((m) => m[0]);
    expect(mentioned.length).toBeGreaterThan(10);
    for (const path of mentioned) expect(Object.keys(openapi.paths), path).toContain(path);
    const withMethod = [
      ...template.matchAll(/\b(GET|POST|PUT|PATCH|DELETE) (\/api\/v1\/[A-Za-z0-9_\-/{}]+)/g),
    ];
    for (const [, method, path] of withMethod) {
      expect(
        openapi.paths[path!]?.[method!.toLowerCase() as (typeof METHODS)[number]],
        `${method} ${path}`,
      ).toBeDefined();
    }
    // curl examples: the method they use exists too (POST when -X POST or -d, GET otherwise).
    for (const line of template.split('\n').filter((l) => l.startsWith('curl '))) {
      const path = /\/api\/v1\/[A-Za-z0-9_\-/{}]+/.exec(line)?.[0];
      if (!path) continue;
      const method = /-X (\w+)/.exec(line)?.[1]?.toLowerCase() ?? 'get';
      expect(openapi.paths[path]?.[method as (typeof METHODS)[number]], `${method} ${path}`).toBeDefined();
    }
  });

  it('covers every bot route of the OpenAPI document', () => {
    const routes = botRoutes();
    expect(routes.length).toBeGreaterThanOrEqual(8);
    for (const { method, path } of routes)
      expect(template, `${method} ${path}`).toContain(`${method} ${path}`);
  });

  it('lists error codes that exist, with their HTTP status, and every code a bot can receive', () => {
    const rows = [...template.matchAll(/^\| `([^`]+)` \| (\d{3}) \|/gm)].map((m) => ({
      code: m[1]!,
      status: Number(m[2]),
    }));
    expect(rows.length).toBeGreaterThan(10);
    for (const { code, status } of rows) {
      expect(Object.keys(ERROR_STATUS), code).toContain(code);
      expect(ERROR_STATUS[code as ErrorCode], code).toBe(status);
      expect(NOT_FOR_BOTS[code as ErrorCode], `${code} is listed as not for bots`).toBeUndefined();
    }
    const listed = new Set(rows.map((r) => r.code));
    const missing = (Object.keys(ERROR_STATUS) as ErrorCode[]).filter(
      (code) => !listed.has(code) && !(code in NOT_FOR_BOTS),
    );
    expect(missing, 'error codes a bot can receive but the skill file does not explain').toEqual([]);
    // Every error status a bot route documents has at least one code in the table.
    const statuses = new Set(rows.map((r) => r.status));
    for (const { method, path } of botRoutes()) {
      const responses =
        openapi.paths[path]![method.toLowerCase() as (typeof METHODS)[number]]!.responses ?? {};
      for (const status of Object.keys(responses)
        .map(Number)
        .filter((s) => s >= 400)) {
        expect(statuses.has(status), `${method} ${path} answers ${status}`).toBe(true);
      }
    }
  });

  it('names the MCP tools that botpay mcp serves', () => {
    const sentence = /`botpay mcp` gives you all of this as tools \(([^)]+)\)/.exec(
      template.replace(/\n/g, ' '),
    );
    expect(sentence).not.toBeNull();
    const named = sentence![1]!.split(',').map((s) => s.trim());
    expect(named.sort()).toEqual(BOT_TOOLS.map((t) => t.name).sort());
  });
});
