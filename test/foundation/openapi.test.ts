import { spawnSync } from 'node:child_process';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeTable } from '../../src/app.ts';
import { createTestService, type TestService } from '../support/service.ts';

// The document as served, checked by `redocly lint` with its recommended rules (redocly.yaml and
// .redocly.lint-ignore.yaml say what is configured and why). .ci/run runs the same lint on the
// document of a freshly built app (scripts/openapi-dump.ts).
const OPENAPI_FILE = join('test-artifacts', 'openapi.json');

function redoclyLint(file: string): { status: number | null; output: string } {
  const run = spawnSync(process.execPath, ['node_modules/@redocly/cli/bin/cli.js', 'lint', file], {
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

describe('OpenAPI document and docs page', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('serves OpenAPI 3.1 with every bot route of the spec so far, with security on protected ones', async () => {
    const res = await svc.app.inject({ url: '/openapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        '/api/v1/bots/register',
        '/api/v1/bot/status',
        '/api/v1/bot/wallet/check',
        '/api/v1/owner/claims',
      ]),
    );
    expect(doc.paths['/api/v1/bot/status'].get.security).toEqual([{ botKey: [] }]);
    // Public routes say so (security: []), so that no route is public by omission.
    expect(doc.paths['/api/v1/bots/register'].post.security).toEqual([]);
    expect(
      doc.paths['/api/v1/bots/register'].post.requestBody.content['application/json'].schema.required,
    ).toEqual(['bot_name', 'owner_email']);
  });

  it('every operation declares its security (public ones security: []) and has an operationId', async () => {
    const doc = (await svc.app.inject({ url: '/openapi.json' })).json() as {
      paths: Record<string, Record<string, { security?: unknown[]; operationId?: string; tags?: string[] }>>;
    };
    const ids = new Set<string>();
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        expect(Array.isArray(op.security), `${method} ${path}`).toBe(true);
        expect(op.operationId, `${method} ${path}`).toMatch(/^[a-z]+[A-Za-z0-9]*$/);
        ids.add(op.operationId!);
      }
    }
    expect(ids.size).toBe(Object.values(doc.paths).reduce((n, ops) => n + Object.keys(ops).length, 0));
    expect(doc.paths['/api/v1/tunnel/connect']!.get!.security).toEqual([{ tunnelToken: [] }]);
  });

  it('describes the API only: no dashboard page, form or asset (they stay in the route table)', async () => {
    const doc = (await svc.app.inject({ url: '/openapi.json' })).json() as { paths: Record<string, unknown> };
    const paths = Object.keys(doc.paths);
    expect(
      paths.filter((p) => !p.startsWith('/api/')),
      paths.join('\n'),
    ).toEqual([]);
    const dashboard = routeTable(svc.app).filter((r) => r.dashboard);
    expect(dashboard.length).toBeGreaterThan(40);
    expect(dashboard.map((r) => r.url)).toEqual(
      expect.arrayContaining(['/', '/signin', '/bots/:bot_id/fund']),
    );
  });

  it('passes `redocly lint` with the recommended rules', async () => {
    const res = await svc.app.inject({ url: '/openapi.json' });
    await mkdir('test-artifacts', { recursive: true });
    // Both database legs may run this at once: write aside, then rename (atomic).
    const temp = `${OPENAPI_FILE}.${process.pid}.${Date.now()}`;
    await writeFile(temp, res.body);
    await rename(temp, OPENAPI_FILE);
    const lint = redoclyLint(OPENAPI_FILE);
    expect(lint.output).toMatch(/validated in/);
    expect(lint.status, lint.output).toBe(0);
    // Not even a warning (the dashboard's pages, which had 50, are no longer in the document).
    expect(lint.output, lint.output).not.toMatch(/You have \d+ warnings?/);
    expect(lint.output).toMatch(/Your API description is valid/);
  });

  it('serves a human-readable docs page', async () => {
    const res = await svc.app.inject({ url: '/docs/' });
    expect([200, 302]).toContain(res.statusCode);
    const page = res.statusCode === 302 ? await svc.app.inject({ url: String(res.headers.location) }) : res;
    expect(page.body).toMatch(/swagger/i);
  });
});
