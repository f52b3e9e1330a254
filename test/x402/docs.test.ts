import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcileWallet } from '../../src/x402/reconcile.ts';
import { createOwner, createTestService, type TestOwner, type TestService } from '../support/service.ts';
import { ANVIL_KEYS, anvilBinary } from './localChain.ts';
import {
  expectChainMatchesLedger,
  fundedBot,
  type Seller,
  sellerV2,
  startWorld,
  WEATHER,
  type World,
} from './world.ts';

// The curl blocks of docs/x402.md (```sh x402-fetch and ```sh x402-pay) run as written with bash,
// curl and jq against a real service and a seller behind the reference @x402/express middleware on
// a local chain: the header's carriage return, base64, `.accepts`, the header the answer names.

const binary = anvilBinary();
const jq = spawnSync('jq', ['--version']).status === 0;
if ('reason' in binary) console.warn(`x402 docs tests skipped: ${binary.reason}`);
if (!jq) console.warn('x402 docs tests skipped: jq is not installed');

const DOC = readFileSync(join(process.cwd(), 'docs/x402.md'), 'utf8');

function block(info: string): string {
  const fence = '```';
  const m = new RegExp(`${fence}sh ${info}\\n([\\s\\S]*?)${fence}`).exec(DOC);
  if (!m) throw new Error(`docs/x402.md has no \`\`\`sh ${info} block`);
  return m[1]!;
}

describe.runIf('path' in binary && jq)('the curl blocks of docs/x402.md', () => {
  let world: World;
  let svc: TestService;
  let owner: TestOwner;
  let serviceUrl: string;
  let seller: Seller;
  let dir: string;
  const payTo = privateKeyToAccount(ANVIL_KEYS[2]).address;

  beforeAll(async () => {
    world = await startWorld((binary as { path: string }).path);
    svc = await createTestService({ env: world.env });
    serviceUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
    owner = await createOwner(svc);
    seller = await sellerV2(world, { payTo });
    dir = mkdtempSync(join(tmpdir(), 'botpay-x402-doc-'));
  }, 120_000);

  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    await seller?.close();
    await svc?.close();
    await world?.close();
  });

  /** Runs a block with bash (asynchronously: the service answering it runs in this process). */
  async function run(code: string, apiKey: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const child = spawn('bash', ['-euo', 'pipefail', '-c', code], {
        cwd: dir,
        env: { PATH: process.env.PATH ?? '', BOTPAY_URL: serviceUrl, API_KEY: apiKey, RESOURCE: seller.url },
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => {
        out += String(d);
      });
      child.stderr.on('data', (d) => {
        err += String(d);
      });
      child.on('close', (code) =>
        code === 0 ? resolve(out) : reject(new Error(`exit ${code}: ${err}\n${out}`)),
      );
    });
  }

  it('sign mode: decode the header, send .accepts, repeat the request with the header named', async () => {
    const { bot, address } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const out = (await run(block('x402-pay'), bot.api_key)).trim().split('\n');
    expect(JSON.parse(out[0]!)).toMatchObject({
      status: 'approved',
      amount_usd: 0.02,
      payment_header_name: 'PAYMENT-SIGNATURE',
    });
    expect(JSON.parse(out.at(-1)!)).toEqual(WEATHER);
    expect(await world.token.balanceOf(address)).toBe(980_000n);
    await reconcileWallet(svc.ctx, bot.bot_id);
    await expectChainMatchesLedger(world, svc, bot.bot_id, address);
  });

  it('fetch mode: one request to the service returns the paid resource', async () => {
    const { bot, address } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const out = JSON.parse(await run(block('x402-fetch'), bot.api_key));
    expect(out).toMatchObject({ paid: true, payment: { amount_usd: 0.02 }, response: { status: 200 } });
    expect(JSON.parse(out.response.body_text)).toEqual(WEATHER);
    expect(await world.token.balanceOf(address)).toBe(980_000n);
  });

  it('the blocks need nothing a fresh machine lacks but curl, jq and coreutils', () => {
    const all = block('x402-pay') + block('x402-fetch');
    expect(all).not.toMatch(/\buuidgen\b/);
    expect(all).toContain("tr -d '\\r'");
    expect(all).toContain('.accepts');
  });
});
