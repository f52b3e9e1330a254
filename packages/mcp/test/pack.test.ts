import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPostgres } from '../../../test/support/db.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestService,
} from '../../../test/support/service.ts';
import { packPackage } from '../../client/test/pack.ts';

// @botpay/mcp as a user gets it: `npm pack` of it and of @botpay/client (each builds through
// prepack), installed into a fresh project outside this repository, its bin run by the official
// MCP client over stdio and by the MCP Inspector's CLI (@modelcontextprotocol/inspector-cli, from
// the npm registry, pinned in the root package.json) — over stdio against the bin, and over
// Streamable HTTP against the service's /mcp — with a real service on 127.0.0.1 behind both.
// The tests run offline: @botpay/client installs from its tarball (no dependencies); the MCP
// SDK and Ajv, which npm would fetch from the registry, are linked from this repository's
// node_modules (the versions the lock pins). The service's source is nowhere in the project.

const run = promisify(execFile);
const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const REPO = resolve(PACKAGE_DIR, '../..');
const INSPECTOR = join(REPO, 'node_modules/@modelcontextprotocol/inspector-cli/build/cli.js');

describe.skipIf(isPostgres)('the packed MCP server in a fresh project', () => {
  let work: string;
  let project: string;
  let bin: string;
  let mcpTarball: string;
  let svc: TestService;
  let baseUrl: string;
  let apiKey: string;
  let botId: string;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'botpay-mcp-pack-'));
    const client = await packPackage(join(REPO, 'packages/client'), work);
    const mcp = await packPackage(PACKAGE_DIR, work);
    mcpTarball = mcp;
    project = join(work, 'agent');
    await mkdir(project);
    await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'agent', private: true }));
    await run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', client], {
      cwd: project,
      timeout: 120_000,
    });
    const target = join(project, 'node_modules/@botpay/mcp');
    await mkdir(target, { recursive: true });
    await run('tar', ['-xzf', mcp, '-C', target, '--strip-components=1']);
    await mkdir(join(project, 'node_modules/@modelcontextprotocol'), { recursive: true });
    for (const dep of ['@modelcontextprotocol/sdk', 'ajv']) {
      await symlink(join(REPO, 'node_modules', dep), join(project, 'node_modules', dep), 'dir');
    }
    bin = join(target, 'dist/bin.js');

    svc = await createTestService();
    baseUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 1250 });
    apiKey = bot.api_key;
    botId = bot.bot_id;
  }, 300_000);

  afterAll(async () => {
    await svc?.close();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('ships the bundled bin and its map, no sources, tests or scripts', async () => {
    const { stdout } = await run('tar', ['-tzf', mcpTarball]);
    const files = stdout.split('\n').filter(Boolean).sort();
    expect(files).toEqual([
      'package/README.md',
      'package/dist/bin.js',
      'package/dist/bin.js.map',
      'package/package.json',
    ]);
  });

  it('runs as an agent starts it: the official client over stdio lists and calls the tools', async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [bin],
      cwd: project,
      env: { PATH: process.env.PATH ?? '', BOTPAY_API_KEY: apiKey, BOTPAY_URL: baseUrl },
    });
    const client = new Client({ name: 'fresh-agent', version: '1.0.0' });
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      expect(tools.length).toBeGreaterThanOrEqual(12);
      for (const t of tools) expect(t.outputSchema?.type, t.name).toBe('object');
      const wallet = (await client.callTool({ name: 'wallet_check', arguments: {} })) as {
        structuredContent?: Record<string, unknown>;
      };
      expect(wallet.structuredContent).toMatchObject({ balance_usd: 12.5 });
    } finally {
      await client.close();
    }
  });

  async function inspector(config: object, args: string[]): Promise<Record<string, unknown>> {
    const file = join(work, `inspector-${Math.random().toString(36).slice(2)}.json`);
    await writeFile(file, JSON.stringify({ mcpServers: { botpay: config } }));
    // The CLI reads its own package.json through a path relative to the working directory.
    const { stdout } = await run(
      process.execPath,
      [INSPECTOR, '--cli', '--config', file, '--server', 'botpay', ...args],
      {
        cwd: join(project, 'node_modules'),
        env: { PATH: process.env.PATH ?? '' },
        timeout: 60_000,
      },
    );
    return JSON.parse(stdout) as Record<string, unknown>;
  }

  it('the MCP Inspector CLI lists and calls the tools of the bin over stdio', async () => {
    // The entry a user writes in an MCP client's mcpServers file.
    const server = { command: 'node', args: [bin], env: { BOTPAY_API_KEY: apiKey, BOTPAY_URL: baseUrl } };
    const listed = (await inspector(server, ['--method', 'tools/list'])) as { tools: { name: string }[] };
    expect(listed.tools.map((t) => t.name)).toContain('checkout');
    const status = await inspector(server, ['--method', 'tools/call', '--tool-name', 'status']);
    expect(status).toMatchObject({ structuredContent: { bot_id: botId, status: 'active' } });
    const refused = await inspector(server, [
      '--method',
      'tools/call',
      '--tool-name',
      'checkout_status',
      '--tool-arg',
      'confirmation_id=chk_aaaaaaaaaaaaaaaa',
    ]);
    expect(refused).toMatchObject({ isError: true });
    expect(JSON.stringify(refused)).toContain('not_found');
  });

  it('the MCP Inspector CLI lists and calls the tools of the service’s /mcp over Streamable HTTP', async () => {
    const server = { type: 'streamable-http', url: `${baseUrl}/mcp` };
    const auth = ['--header', `Authorization: Bearer ${apiKey}`];
    const listed = (await inspector(server, ['--method', 'tools/list', ...auth])) as {
      tools: { name: string; outputSchema?: { type: string } }[];
    };
    expect(listed.tools.map((t) => t.name)).toContain('wait_for_decision');
    expect(listed.tools.every((t) => t.outputSchema?.type === 'object')).toBe(true);
    const wallet = await inspector(server, [
      '--method',
      'tools/call',
      '--tool-name',
      'wallet_check',
      ...auth,
    ]);
    expect(wallet).toMatchObject({ structuredContent: { balance_usd: 12.5 } });
    // Without the key the Inspector cannot connect at all.
    await expect(inspector(server, ['--method', 'tools/list'])).rejects.toThrow();
  });
});
