import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { type ServiceProcess, startServiceProcess } from '../support/process.ts';

// What a fresh service does not need is loaded on first use, not at start (docs/deploy.md,
// ARCHITECTURE.md Start-up): the partner wallet rail's libraries (viem, @x402/*) with the first
// wallet action, nodemailer with the first mail over SMTP, undici with the first webhook delivery
// or cluster hand-over, qrcode with the first wallet page, the PostgreSQL driver only for
// PostgreSQL, Swagger UI with the first /docs request, the MCP SDK and Ajv with the first
// authenticated /mcp request. playwright-core belongs to the tests: `serve` never loads it. Each
// path's first use is exercised by the tests of its area (test/x402, test/notifications,
// test/webhooks, test/tunnels/cluster, the PostgreSQL leg, test/mcp); /docs and /mcp here, in the
// compiled build a real `botpay serve` runs.
const NOT_AT_START = [
  'viem',
  '@x402/core',
  '@x402/evm',
  'nodemailer',
  'undici',
  'qrcode',
  'pg',
  '@fastify/swagger-ui',
  '@fastify/static',
  '@modelcontextprotocol/sdk',
  'ajv',
  'playwright-core',
];

const packagesIn = (log: string) =>
  new Set([...log.matchAll(/\/node_modules\/((?:@[^/]+\/)?[^/]+)\//g)].map((m) => m[1]));

describe('lazy loading', { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'botpay-lazy-'));
  const log = join(dir, 'modules.log');
  let service: ServiceProcess | undefined;
  afterAll(async () => {
    if (service) {
      service.child.kill('SIGTERM');
      await service.exited;
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('a started service has loaded none of them; /docs works on first use and loads Swagger UI then', async () => {
    const hook = pathToFileURL(join(process.cwd(), 'test', 'support', 'moduleLog.mjs')).href;
    service = await startServiceProcess({
      DATA_DIR: join(dir, 'data'),
      DATABASE_URL: '',
      SMTP_URL: '',
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${hook}`.trim(),
      BOTPAY_MODULE_LOG: log,
    });
    const atStart = packagesIn(readFileSync(log, 'utf8'));
    // The log works: what every start needs is in it.
    expect(atStart).toContain('fastify');
    expect(atStart).toContain('@electric-sql/pglite');
    expect(NOT_AT_START.filter((name) => atStart.has(name))).toEqual([]);

    const page = await fetch(`${service.url}/docs`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await page.text();
    expect(html).toMatch(/swagger/i);
    // Its scripts and styles, and the document it shows.
    const script = /src="([^"]+\.js)"/.exec(html)?.[1];
    expect(script).toBeDefined();
    const js = await fetch(new URL(script as string, `${service.url}/docs/`));
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toMatch(/javascript/);
    expect((await js.arrayBuffer()).byteLength).toBeGreaterThan(1000);
    const json = await fetch(`${service.url}/docs/json`);
    expect(json.status).toBe(200);
    const doc = (await json.json()) as { openapi?: string; paths?: Record<string, unknown> };
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths ?? {})).toContain('/api/v1/bot/status');
    expect((await fetch(`${service.url}/docs/no-such-file.js`)).status).toBe(404);
    expect(packagesIn(readFileSync(log, 'utf8'))).toContain('@fastify/swagger-ui');
  });

  it('/mcp loads the MCP SDK on its first authenticated request, and serves the tools from the build', async () => {
    if (!service) throw new Error('the service did not start');
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    const body = (id: number, method: string, params: object) =>
      JSON.stringify({ jsonrpc: '2.0', id, method, params });
    // A passer-by is refused before anything is loaded.
    const refused = await fetch(`${service.url}/mcp`, {
      method: 'POST',
      headers,
      body: body(1, 'tools/list', {}),
    });
    expect(refused.status).toBe(401);
    expect(packagesIn(readFileSync(log, 'utf8'))).not.toContain('@modelcontextprotocol/sdk');
    const registered = await fetch(`${service.url}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ bot_name: 'lazy-mcp', owner_email: 'lazy@example.com' }),
    });
    expect(registered.status).toBe(201);
    const { api_key, bot_id } = (await registered.json()) as { api_key: string; bot_id: string };
    const called = await fetch(`${service.url}/mcp`, {
      method: 'POST',
      headers: { ...headers, authorization: `Bearer ${api_key}`, 'mcp-protocol-version': '2025-06-18' },
      body: body(2, 'tools/call', { name: 'status', arguments: {} }),
    });
    expect(called.status).toBe(200);
    const text = await called.text();
    expect(text).toContain(bot_id);
    expect(text).toContain('pending');
    const loaded = packagesIn(readFileSync(log, 'utf8'));
    expect(loaded).toContain('@modelcontextprotocol/sdk');
    expect(loaded).toContain('ajv');
  });
});
