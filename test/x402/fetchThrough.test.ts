import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { wrapFetchWithPayment, x402Client } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type BotPayClient,
  botPayErrorOf,
  isBotPayError,
  isX402FetchAnswer,
  registerBotPay,
  type X402FetchAnswer,
  type X402PaymentRequirements,
  x402FetchResponse,
} from '../../packages/client/src/index.ts';
import { reconcileWallet } from '../../src/x402/reconcile.ts';
import { createOwner, createTestService, type TestOwner, type TestService } from '../support/service.ts';
import { snapshot } from './helpers.ts';
import { ANVIL_KEYS, anvilBinary } from './localChain.ts';
import {
  eventTypes,
  expectChainMatchesLedger,
  fundedBot,
  type Seller,
  sellerV1,
  sellerV2,
  startWorld,
  WEATHER,
  type World,
} from './world.ts';

// POST /api/v1/bot/x402/fetch: the service makes the resource request itself, pays the 402 under the
// guardrails and returns the resource, so the owner's domain and pay-to lists are judged on the
// connection the service made. Against real sellers (@x402/express and x402-express@1) on a local
// chain with a real facilitator (test/x402/world.ts); the bot through the SDK, the MCP server and
// the reference @x402/fetch client. The hostile bot of issue 31 — an allow-list naming one host,
// the requirements of another seller — is played in both modes.

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const binary = anvilBinary();
if ('reason' in binary) console.warn(`x402 fetch tests skipped: ${binary.reason}`);

function answer(result: Awaited<ReturnType<BotPayClient['fetchX402']>>): X402FetchAnswer {
  if (!isX402FetchAnswer(result)) throw new Error(`expected the resource, got ${JSON.stringify(result)}`);
  return result;
}

describe.runIf('path' in binary)('requesting x402 resources through the service', () => {
  let world: World;
  let svc: TestService;
  let owner: TestOwner;
  let serviceUrl: string;
  let v2: Seller;
  let v1: Seller;
  let post: Seller;
  let wrongDomain: Seller;
  /** The allowed host's seller (named by `localhost`) and another seller (on 127.0.0.1). */
  let allowed: Seller;
  let other: Seller;
  const payTo = privateKeyToAccount(ANVIL_KEYS[2]).address;
  const otherPayTo = privateKeyToAccount(ANVIL_KEYS[0]).address;

  beforeAll(async () => {
    world = await startWorld((binary as { path: string }).path);
    svc = await createTestService({ env: world.env });
    serviceUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
    owner = await createOwner(svc);
    v2 = await sellerV2(world, { payTo });
    v1 = await sellerV1(world, { payTo });
    post = await sellerV2(world, { payTo, method: 'POST', path: '/forecast' });
    wrongDomain = await sellerV2(world, { payTo, extra: { name: 'USD Coin', version: '1' } });
    allowed = await sellerV2(world, { payTo, host: 'localhost', path: '/report' });
    other = await sellerV2(world, { payTo: otherPayTo, amount: '30000', path: '/report' });
  }, 120_000);

  afterAll(async () => {
    await Promise.all([v2, v1, post, wrongDomain, allowed, other].map((s) => s?.close()));
    await svc?.close();
    await world?.close();
  });

  it('pays an x402 v2 seller and returns the resource; purchase.approved once the seller took it', async () => {
    const { bot, address, client } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const result = answer(await client.fetchX402({ url: v2.url }));
    expect(result).toMatchObject({
      paid: true,
      payment: { payment_status: 'authorized', amount_usd: 0.02, pay_to: payTo, x402_version: 2 },
      response: { status: 200, truncated: false },
    });
    expect(JSON.parse(result.response.body_text!)).toEqual(WEATHER);
    expect(result.response.headers['payment-response']).toBeTruthy();
    const res = x402FetchResponse(result);
    expect(await res.json()).toEqual(WEATHER);
    expect(await world.token.balanceOf(address)).toBe(980_000n);
    expect(await eventTypes(svc, bot.bot_id)).toContain('purchase.approved');
    const row = (
      await svc.ctx.db.query<{ domain_check: string }>(
        'SELECT domain_check FROM x402_payments WHERE bot_id = $1',
        [bot.bot_id],
      )
    )[0]!;
    expect(row.domain_check).toBe('connected');
    expect(await reconcileWallet(svc.ctx, bot.bot_id)).toMatchObject({ settled: 1 });
    // Announced once: the settlement does not repeat it.
    expect((await eventTypes(svc, bot.bot_id)).filter((t) => t === 'purchase.approved')).toHaveLength(1);
    await expectChainMatchesLedger(world, svc, bot.bot_id, address);
  });

  it('pays an x402 v1 seller (x402-express@1) and sends a POST with its body', async () => {
    const { bot, address, client } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const viaV1 = answer(await client.fetchX402({ url: v1.url }));
    expect(viaV1).toMatchObject({ paid: true, payment: { x402_version: 1 }, response: { status: 200 } });
    expect(viaV1.response.headers['x-payment-response']).toBeTruthy();
    const viaPost = answer(
      await client.fetchX402({
        url: post.url,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ city: 'Lyon' }),
      }),
    );
    expect(viaPost.paid).toBe(true);
    expect(JSON.parse(viaPost.response.body_text!)).toEqual({ ...WEATHER, echo: { city: 'Lyon' } });
    await reconcileWallet(svc.ctx, bot.bot_id);
    await expectChainMatchesLedger(world, svc, bot.bot_id, address);
  });

  it('a resource that asks for nothing is returned unpaid; a retry with the same Idempotency-Key pays once', async () => {
    const { address, client } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const free = answer(await client.fetchX402({ url: `${v2.origin}/nothing-here` }));
    expect(free).toMatchObject({ paid: false, payment: null, response: { status: 404 } });
    const first = answer(await client.fetchX402({ url: v2.url }, { idempotencyKey: 'weather-1' }));
    const again = answer(await client.fetchX402({ url: v2.url }, { idempotencyKey: 'weather-1' }));
    expect(again).toEqual(first);
    expect(await world.token.balanceOf(address)).toBe(980_000n);
    const other = await client.fetchX402({ url: v1.url }, { idempotencyKey: 'weather-1' }).catch((e) => e);
    expect(isBotPayError(other, 'idempotency_conflict')).toBe(true);
  });

  describe('the hostile bot of issue 31: allow_domains names one host, the requirements are another seller’s', () => {
    let bot: Awaited<ReturnType<typeof fundedBot>>;
    beforeAll(async () => {
      bot = await fundedBot(world, svc, owner, serviceUrl, 100, { allow_domains: ['localhost'] });
    });

    async function offered(seller: Seller) {
      const unpaid = await fetch(seller.url);
      return JSON.parse(Buffer.from(unpaid.headers.get('payment-required')!, 'base64').toString()) as {
        accepts: X402PaymentRequirements[];
      };
    }

    it('sign mode: naming the allowed host with the other seller’s requirements signs nothing', async () => {
      const before = await snapshot(svc, bot.bot.bot_id);
      const refused = await bot.client
        .payX402({ resource_url: allowed.url, payment_requirements: (await offered(other)).accepts })
        .catch((e: unknown) => e);
      expect(isBotPayError(refused, 'destination_not_allowed')).toBe(true);
      expect((refused as Error).message).toMatch(/does not ask for this payment/);
      // Nothing signed, reserved or counted but the refused request itself.
      const after = await snapshot(svc, bot.bot.bot_id);
      expect(after.split('\n').slice(0, 4)).toEqual(before.split('\n').slice(0, 4));
      // Naming the other host outright is refused before anyone is contacted.
      const named = await bot.client
        .payX402({ resource_url: other.url, payment_requirements: (await offered(other)).accepts })
        .catch((e: unknown) => e);
      expect(isBotPayError(named, 'destination_not_allowed')).toBe(true);
    });

    it('sign mode: the allowed host’s own requirements are paid, the domain checked by the service', async () => {
      const paid = await bot.client.payX402({
        resource_url: allowed.url,
        payment_requirements: (await offered(allowed)).accepts,
      });
      expect(paid.approved).toBe(true);
      const row = (
        await svc.ctx.db.query<{ domain_check: string; pay_to: string }>(
          'SELECT domain_check, pay_to FROM x402_payments WHERE id = $1',
          [paid.payment_id],
        )
      )[0]!;
      expect(row).toEqual({ domain_check: 'probed', pay_to: payTo });
    });

    it('fetch mode: the other host is refused before the service connects; the allowed one is paid', async () => {
      const refused = await bot.client.fetchX402({ url: other.url }).catch((e: unknown) => e);
      expect(isBotPayError(refused, 'destination_not_allowed')).toBe(true);
      const paid = answer(await bot.client.fetchX402({ url: allowed.url }));
      expect(paid).toMatchObject({ paid: true, payment: { pay_to: payTo } });
      expect(await world.token.balanceOf(otherPayTo)).toBeLessThan(10n ** 18n);
    });

    it('@x402/fetch with registerBotPay: the other seller’s 402 is refused with a typed error', async () => {
      const error = await wrapFetchWithPayment(
        fetch,
        registerBotPay(new x402Client(), bot.client),
      )(other.url).catch((e: unknown) => e);
      expect(botPayErrorOf(error)?.code).toBe('destination_not_allowed');
    });
  });

  it('a seller that refuses the payment (wrong EIP-712 domain): not paid, released at once, x402.refused', async () => {
    const { bot, address, client } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const result = answer(await client.fetchX402({ url: wrongDomain.url }));
    expect(result).toMatchObject({
      paid: false,
      payment: { payment_status: 'refused', refusal_reason: 'invalid_exact_evm_token_version_mismatch' },
      response: { status: 402 },
    });
    expect(result.message).toMatch(/not paid/);
    const w = (
      await svc.ctx.db.query<{ available_micros: string; authorized_micros: string }>(
        'SELECT available_micros, authorized_micros FROM x402_wallets WHERE bot_id = $1',
        [bot.bot_id],
      )
    )[0]!;
    expect([Number(w.available_micros), Number(w.authorized_micros)]).toEqual(
      [100, 0].map((c) => c * 10_000),
    );
    const types = await eventTypes(svc, bot.bot_id);
    expect(types).toContain('x402.refused');
    expect(types).not.toContain('purchase.approved');
    await reconcileWallet(svc.ctx, bot.bot_id);
    await expectChainMatchesLedger(world, svc, bot.bot_id, address);
  });

  it('a payment held for the owner: 202, then the same request with payment_id once approved', async () => {
    const { address, client } = await fundedBot(world, svc, owner, serviceUrl, 100, {
      approval_mode: 'ask_for_everything',
    });
    const held = await client.fetchX402({ url: v2.url });
    expect(isX402FetchAnswer(held)).toBe(false);
    const pending = held as Exclude<typeof held, X402FetchAnswer>;
    expect(pending).toMatchObject({ approved: false, status: 'pending_confirmation' });
    const early = await client.fetchX402({ url: v2.url, payment_id: pending.payment_id });
    expect(isX402FetchAnswer(early)).toBe(false);
    const ok = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/approvals/${pending.payment_id}/approve`,
      headers: owner.auth,
    });
    expect(ok.statusCode, ok.body).toBe(200);
    const paid = answer(await client.fetchX402({ url: v2.url, payment_id: pending.payment_id }));
    expect(paid).toMatchObject({ paid: true, response: { status: 200 } });
    expect(await world.token.balanceOf(address)).toBe(980_000n);
    const mismatch = await client
      .fetchX402({ url: v1.url, payment_id: pending.payment_id })
      .catch((e: unknown) => e);
    expect(isBotPayError(mismatch, 'validation_error')).toBe(true);
  });

  it('the SSRF rules of webhooks apply: without ALLOW_PRIVATE_WEBHOOK_TARGETS no loopback or private address', async () => {
    const strict = await createTestService({ env: { ...world.env, ALLOW_PRIVATE_WEBHOOK_TARGETS: 'false' } });
    try {
      const strictUrl = await strict.app.listen({ port: 0, host: '127.0.0.1' });
      const strictOwner = await createOwner(strict);
      const { client } = await fundedBot(world, strict, strictOwner, strictUrl, 100);
      const counting = await sellerV2(world, { payTo });
      // Literal loopback, a name resolving to loopback, the cloud metadata address: refused unconnected.
      for (const url of [
        counting.url,
        counting.url.replace('127.0.0.1', 'localhost'),
        'http://169.254.169.254/x',
      ]) {
        const refused = await client.fetchX402({ url }).catch((e: unknown) => e);
        expect(isBotPayError(refused, 'destination_not_allowed'), `${url}: ${String(refused)}`).toBe(true);
        expect((refused as Error).message).toMatch(/does not connect/);
      }
      await counting.close();
    } finally {
      await strict.close();
    }
  });

  it('the MCP tool x402_fetch (botpay mcp, official MCP client over stdio) returns the paid resource', async () => {
    const { bot } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [join(REPO, 'bin/botpay.mjs'), 'mcp'],
      cwd: REPO,
      env: { PATH: process.env.PATH ?? '', BOTPAY_API_KEY: bot.api_key, BOTPAY_URL: serviceUrl },
      stderr: 'pipe',
    });
    const mcp = new Client({ name: 'botpay-test-agent', version: '1.0.0' });
    await mcp.connect(transport);
    try {
      const { tools } = await mcp.listTools();
      expect(tools.map((t) => t.name)).toContain('x402_fetch');
      const result = (await mcp.callTool({ name: 'x402_fetch', arguments: { url: v2.url } }, undefined, {
        timeout: 60_000,
      })) as { isError?: boolean; content: { text: string }[] };
      expect(result.isError ?? false).toBe(false);
      const body = JSON.parse(result.content[0]!.text) as X402FetchAnswer & { idempotency_key: string };
      expect(body).toMatchObject({ paid: true, response: { status: 200 } });
      expect(JSON.parse(body.response.body_text!)).toEqual(WEATHER);
      expect(body.idempotency_key).toEqual(expect.any(String));
      const refused = (await mcp.callTool({
        name: 'x402_fetch',
        arguments: { url: 'ftp://x.example/a' },
      })) as {
        isError?: boolean;
        content: { text: string }[];
      };
      expect(refused.isError).toBe(true);
      expect(JSON.parse(refused.content[0]!.text)).toMatchObject({ error: 'validation_error' });
    } finally {
      await mcp.close();
    }
  }, 60_000);
});
