import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPostgres } from '../../../test/support/db.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestService,
} from '../../../test/support/service.ts';
import { registerTunnelBot } from '../../../test/tunnels/helpers.ts';
import { packPackage } from './pack.ts';

// The SDK as a user gets it: `npm pack` (which builds dist/ through prepack), the tarball installed
// into fresh projects outside this repository, then used from plain Node ESM, from CommonJS, and
// type-checked by TypeScript consumers with moduleResolution NodeNext and Bundler — against the
// real service listening on 127.0.0.1. Nothing from the workspace leaks in: the projects resolve
// only what the tarball installed (plus @types/node and the compiler for the type checks).

const run = promisify(execFile);
const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const REPO = resolve(PACKAGE_DIR, '../..');
const TSC = join(REPO, 'node_modules/typescript/bin/tsc');

// The package does not depend on the database: the embedded leg runs it once.
describe.skipIf(isPostgres)('the packed SDK in fresh projects', () => {
  let work: string;
  let tarball: string;
  let svc: TestService;
  let baseUrl: string;
  let apiKey: string;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'botpay-sdk-pack-'));
    tarball = await packPackage(PACKAGE_DIR, work);
    svc = await createTestService({ env: { REGISTRATION_RATE_LIMIT_PER_HOUR: '1000' } });
    baseUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 1250 },
    });
    apiKey = bot.api_key;
  }, 180_000);

  afterAll(async () => {
    await svc?.close();
    if (work) await rm(work, { recursive: true, force: true });
  });

  /** A new project with the tarball installed (offline: it has no runtime dependencies). */
  async function project(name: string, packageJson: Record<string, unknown>): Promise<string> {
    const dir = join(work, name);
    await mkdir(dir);
    await writeFile(join(dir, 'package.json'), JSON.stringify({ name, private: true, ...packageJson }));
    await run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', tarball], {
      cwd: dir,
      timeout: 120_000,
    });
    return dir;
  }

  async function node(dir: string, file: string): Promise<Record<string, unknown>> {
    const { stdout } = await run(process.execPath, [file], {
      cwd: dir,
      env: { PATH: process.env.PATH, BOTPAY_URL: baseUrl, BOTPAY_API_KEY: apiKey },
      timeout: 60_000,
    });
    return JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}');
  }

  it('ships dist (ESM, CommonJS, declarations, maps) and no test or script files', async () => {
    const { stdout } = await run('tar', ['-tzf', tarball]);
    const files = stdout.split('\n').filter(Boolean);
    for (const f of [
      'package/dist/esm/index.js',
      'package/dist/esm/index.d.ts',
      'package/dist/esm/index.js.map',
      'package/dist/cjs/index.js',
      'package/dist/cjs/index.d.ts',
      'package/dist/cjs/package.json',
      'package/dist/esm/webhooks/express.js',
      'package/dist/esm/tunnel/index.js',
      'package/dist/cjs/tunnel/index.js',
      'package/dist/esm/tunnel/index.d.ts',
      'package/dist/docs/api.md',
      'package/README.md',
    ]) {
      expect(files).toContain(f);
    }
    expect(files.some((f) => f.includes('/test/') || f.includes('/scripts/'))).toBe(false);
  });

  it('works from plain Node ESM', async () => {
    const dir = await project('esm-consumer', { type: 'module' });
    await writeFile(
      join(dir, 'main.js'),
      `import { BotPayClient, isBotPayError, verifyStandardWebhookAsync } from '@botpay/client';
import { createWebhookReceiver, signStandard } from '@botpay/client/webhooks';
const client = new BotPayClient({ baseUrl: process.env.BOTPAY_URL, apiKey: process.env.BOTPAY_API_KEY });
const status = await client.status();
const wallet = await client.walletCheck();
let registered;
try {
  registered = await new BotPayClient({ baseUrl: process.env.BOTPAY_URL }).register({ bot_name: 'esm-consumer', owner_email: 'esm@example.com' });
} catch (e) { registered = isBotPayError(e) ? e.code : String(e); }
const at = Math.floor(Date.now() / 1000);
const sig = signStandard('{}', 'whsec_' + 'ab'.repeat(24), 'evt_1', at);
const ok = await verifyStandardWebhookAsync('{}', { 'webhook-id': 'evt_1', 'webhook-timestamp': String(at), 'webhook-signature': sig }, 'whsec_' + 'ab'.repeat(24));
console.log(JSON.stringify({ status: status.status, balance: wallet.balance_usd, registered: registered.status, verify: ok, receiver: typeof createWebhookReceiver }));
`,
    );
    expect(await node(dir, 'main.js')).toEqual({
      status: 'active',
      balance: 12.5,
      registered: 'pending_owner_verification',
      verify: null,
      receiver: 'function',
    });
  });

  it('works from CommonJS', async () => {
    const dir = await project('cjs-consumer', { type: 'commonjs' });
    await writeFile(
      join(dir, 'main.js'),
      `const { BotPayClient, BotPayError } = require('@botpay/client');
const { verifySignature, signPayload, createNodeWebhookHandler } = require('@botpay/client/webhooks');
(async () => {
  const client = new BotPayClient({ baseUrl: process.env.BOTPAY_URL, apiKey: process.env.BOTPAY_API_KEY });
  const status = await client.status();
  let unauthorized;
  try { await new BotPayClient({ baseUrl: process.env.BOTPAY_URL, apiKey: 'svc_live_' + '0'.repeat(48) }).status(); }
  catch (e) { unauthorized = e instanceof BotPayError ? e.status : String(e); }
  const secret = 'whsec_' + 'cd'.repeat(24);
  console.log(JSON.stringify({ status: status.status, unauthorized, verify: verifySignature('x', signPayload('x', secret), secret), handler: typeof createNodeWebhookHandler }));
})().catch((e) => { console.error(e); process.exit(1); });
`,
    );
    expect(await node(dir, 'main.js')).toEqual({
      status: 'active',
      unauthorized: 401,
      verify: true,
      handler: 'function',
    });
  });

  it('the tunnel entry opens the bot’s tunnel from ESM and CommonJS (with ws, its optional peer, installed)', async () => {
    const bot = await registerTunnelBot(svc, 18789);
    const script = (imports: string) => `${imports}
const http = require_http();
(async () => {
  const t = openTunnel({ server: process.env.BOTPAY_URL, token: ${JSON.stringify(bot.tunnel_token)},
    handler: (r) => ({ status: 200, body: 'from the bot: ' + r.method + ' ' + r.path }), log: () => {} });
  await t.waitConnected();
  const u = new URL(process.env.BOTPAY_URL);
  const body = await new Promise((resolve, reject) => http.request({ host: u.hostname, port: u.port, path: '/x', headers: { host: t.hostname } }, (r) => { let b = ''; r.on('data', (c) => { b += c; }); r.on('end', () => resolve(b)); }).on('error', reject).end());
  await t.close();
  console.log(JSON.stringify({ body }));
})().catch((e) => { console.error(e); process.exit(1); });
`;
    for (const [name, type, imports] of [
      [
        'tunnel-esm',
        'module',
        "import { openTunnel } from '@botpay/client/tunnel';\nimport * as nodeHttp from 'node:http';\nconst require_http = () => nodeHttp;",
      ],
      [
        'tunnel-cjs',
        'commonjs',
        "const { openTunnel } = require('@botpay/client/tunnel');\nconst require_http = () => require('node:http');",
      ],
    ] as const) {
      const dir = await project(name, { type });
      await symlink(join(REPO, 'node_modules/ws'), join(dir, 'node_modules/ws'), 'dir');
      await writeFile(join(dir, 'main.js'), script(imports));
      expect(await node(dir, 'main.js')).toEqual({ body: 'from the bot: GET /x' });
    }
  }, 120_000);

  it.each([
    ['NodeNext', { module: 'NodeNext', moduleResolution: 'NodeNext' }, { type: 'module' }],
    ['NodeNext from CommonJS', { module: 'NodeNext', moduleResolution: 'NodeNext' }, { type: 'commonjs' }],
    ['Bundler', { module: 'ESNext', moduleResolution: 'Bundler' }, { type: 'module' }],
  ])(
    'type-checks a TypeScript consumer (%s)',
    async (name, compilerOptions, pkg) => {
      const dir = await project(`ts-${name.replace(/\W+/g, '-').toLowerCase()}`, pkg);
      await mkdir(join(dir, 'node_modules/@types'), { recursive: true });
      await symlink(join(REPO, 'node_modules/@types/node'), join(dir, 'node_modules/@types/node'), 'dir');
      await writeFile(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            ...compilerOptions,
            target: 'ES2022',
            strict: true,
            noEmit: true,
            skipLibCheck: false,
            types: ['node'],
          },
          include: ['main.ts'],
        }),
      );
      await writeFile(
        join(dir, 'main.ts'),
        `import { BotPayClient, type BotStatusResponse, type CheckoutRequest } from '@botpay/client';
import { createWebhookReceiver, type WebhookEvent } from '@botpay/client/webhooks';
export async function main(): Promise<number> {
  const client = new BotPayClient({ baseUrl: 'http://localhost:8080', apiKey: 'svc_live_x' });
  const status: BotStatusResponse = await client.status();
  const order: CheckoutRequest = { profile_index: 1, amount_cents: 100, merchant_name: 'm', merchant_url: 'https://m.example', item_name: 'i' };
  // @ts-expect-error: a wrong field type must be caught (the declarations are real, not any)
  const bad: CheckoutRequest = { ...order, amount_cents: 'one' };
  void bad;
  createWebhookReceiver({ secret: 'whsec_x', onEvent: (e: WebhookEvent) => void e.event });
  return status.status.length;
}
`,
      );
      const checked = await run(process.execPath, [TSC, '-p', dir], { cwd: dir, timeout: 120_000 }).then(
        () => 'ok',
        (e: { stdout?: string }) => e.stdout ?? String(e),
      );
      expect(checked).toBe('ok');
    },
    120_000,
  );

  it('README links work once published: each is this version’s file on unpkg, shipped in the tarball, or an anchor', async () => {
    const { stdout } = await run('tar', ['-tzf', tarball]);
    const files = new Set(stdout.split('\n').filter(Boolean));
    const { stdout: readme } = await run('tar', ['-xzOf', tarball, 'package/README.md']);
    const { stdout: manifest } = await run('tar', ['-xzOf', tarball, 'package/package.json']);
    const { name, version } = JSON.parse(manifest) as { name: string; version: string };
    const headings = new Set(
      [...readme.matchAll(/^#+ (.+)$/gm)].map((m) =>
        (m[1] ?? '')
          .toLowerCase()
          .replace(/[^\w\- ]/g, '')
          .replace(/ /g, '-'),
      ),
    );
    const links = [...readme.replace(/```[\s\S]*?```/g, '').matchAll(/\]\(([^)\s]+)\)/g)].map(
      (m) => m[1] ?? '',
    );
    expect(links.length).toBeGreaterThanOrEqual(4);
    const bad: string[] = [];
    for (const link of links) {
      if (link.startsWith('#')) {
        if (!headings.has(link.slice(1))) bad.push(`${link}: no such heading`);
      } else if (link.startsWith(`https://unpkg.com/${name}@${version}/`)) {
        const file = `package/${link.slice(`https://unpkg.com/${name}@${version}/`.length)}`;
        if (!files.has(file)) bad.push(`${link}: not in the tarball`);
      } else if (!link.startsWith('https://www.npmjs.com/')) {
        bad.push(`${link}: neither this package's own file nor an npm page`);
      }
    }
    expect(bad).toEqual([]);
  });

  /** A TypeScript project with the tarball and only the given @types linked from this repository. */
  async function typeCheck(
    name: string,
    compilerOptions: Record<string, unknown>,
    source: string,
    types: string[],
  ): Promise<string> {
    const dir = await project(name, { type: 'module' });
    await mkdir(join(dir, 'node_modules/@types'), { recursive: true });
    for (const t of types) {
      await symlink(join(REPO, 'node_modules/@types', t), join(dir, 'node_modules/@types', t), 'dir');
    }
    await writeFile(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          ...compilerOptions,
        },
        include: ['main.ts'],
      }),
    );
    await writeFile(join(dir, 'main.ts'), source);
    return run(process.execPath, [TSC, '-p', dir], { cwd: dir, timeout: 120_000 }).then(
      () => 'ok',
      (e: { stdout?: string }) => e.stdout ?? String(e),
    );
  }

  const EVERYWHERE = `import { BotPayClient, verifyWebhookRequest, signPayloadAsync, type CheckoutRequest } from '@botpay/client';
export async function handle(request: Request): Promise<Response> {
  const delivery = await verifyWebhookRequest(request, 'whsec_x');
  if (!delivery.ok) return new Response(delivery.reason, { status: 401 });
  const bot = new BotPayClient({ baseUrl: 'https://pay.example.com', apiKey: 'svc_live_x' });
  const order: CheckoutRequest = { profile_index: 1, amount_cents: 100, merchant_name: 'm', merchant_url: 'https://m.example', item_name: 'i' };
  const result = await bot.checkout(order);
  // @ts-expect-error: a Promise is not a boolean (the async verifiers must be awaited)
  const sure: boolean = signPayloadAsync('x', 'y');
  void sure;
  return new Response(String(result.approved) + delivery.event.event);
}
`;

  // Concurrently: each is a compiler process of its own.
  it.concurrent.each([
    [
      'a browser project (DOM, no @types/node)',
      { lib: ['ES2022', 'DOM'], types: [], module: 'ESNext', moduleResolution: 'Bundler' },
    ],
    [
      'an edge project (WebWorker, no @types/node)',
      { lib: ['ES2022', 'WebWorker'], types: [], module: 'ESNext', moduleResolution: 'Bundler' },
    ],
  ])(
    'the main entry type-checks in %s',
    async (name, options) => {
      const types = (options.types as string[]).length ? ['node'] : [];
      expect(await typeCheck(`main-${name.replace(/\W+/g, '-')}`, options, EVERYWHERE, types)).toBe('ok');
    },
    120_000,
  );

  it('in a Node project without DOM, the main entry and the Express middleware (no @types/express) type-check; the middleware fits Express’s own types', async () => {
    const [withoutExpress, withExpress] = await Promise.all([
      typeCheck(
        'node-no-dom-no-express-types',
        { lib: ['ES2022'], module: 'NodeNext', moduleResolution: 'NodeNext', types: ['node'] },
        `${EVERYWHERE}
import { expressWebhook } from '@botpay/client/webhooks/express';
import { openTunnel, type TunnelHandler } from '@botpay/client/tunnel';
import { createServer } from 'node:http';
const handler = expressWebhook({ secret: 'whsec_x', onEvent: (e) => void e.event });
createServer((req, res) => handler(req, res, (error) => { res.statusCode = error ? 500 : 404; res.end(); }));
const echo: TunnelHandler = async (r) => ({ status: 200, headers: { 'x-path': r.path }, body: r.body });
const tunnel = openTunnel({ server: 'https://pay.example.com', handler: echo });
const webhooks = openTunnel({ server: 'https://pay.example.com', webhooks: { secret: 'whsec_x', onEvent: (e) => void e.data } });
void tunnel.ended.then((end) => end.reason === 'replaced');
void webhooks.close();
// @ts-expect-error: a handler answers with a status
openTunnel({ server: 'https://pay.example.com', handler: async () => ({ body: 'x' }) });
`,
        ['node'],
      ),
      typeCheck(
        'express-typed',
        { module: 'NodeNext', moduleResolution: 'NodeNext', types: ['node'] },
        `import express from 'express';
import { expressWebhook } from '@botpay/client/webhooks/express';
const app = express();
app.post('/webhook', expressWebhook({ secret: 'whsec_x', onEvent: (e) => void e.event }));
app.use(express.json());
`,
        [
          'node',
          'express',
          'express-serve-static-core',
          'serve-static',
          'body-parser',
          'qs',
          'range-parser',
          'send',
          'mime',
          'http-errors',
          'connect',
        ],
      ),
    ]);
    expect(withoutExpress).toBe('ok');
    expect(withExpress).toBe('ok');
  }, 120_000);
});
