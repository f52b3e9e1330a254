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
// PostgreSQL, Swagger UI with the first /docs request. The MCP SDK belongs to `botpay mcp` and
// playwright-core to the tests: `serve` never loads them. Each path's first use is exercised by
// the tests of its area (test/x402, test/notifications, test/webhooks, test/tunnels/cluster, the
// PostgreSQL leg); /docs here.
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
});
