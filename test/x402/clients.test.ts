import { wrapAxiosWithPayment, x402Client as AxiosX402Client } from '@x402/axios';
import { wrapFetchWithPayment, x402Client } from '@x402/fetch';
import axios from 'axios';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BotPayError,
  botPayErrorOf,
  isBotPayError,
  registerBotPay,
} from '../../packages/client/src/index.ts';
import { reconcileWallet } from '../../src/x402/reconcile.ts';
import { createOwner, createTestService, type TestOwner, type TestService } from '../support/service.ts';
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

// The reference x402 clients, unchanged, with the service as their wallet (registerBotPay from the
// SDK): @x402/fetch 2.27 and @x402/axios 2.11 against real sellers — the reference x402 v2
// middleware (@x402/express) and the x402 v1 one (x402-express@1, network `base-sepolia`) — on a
// local chain with a real facilitator (test/x402/world.ts). Nothing is mocked.

const binary = anvilBinary();
if ('reason' in binary) console.warn(`x402 client tests skipped: ${binary.reason}`);

describe.runIf('path' in binary)('the reference x402 clients with the service as their wallet', () => {
  let world: World;
  let svc: TestService;
  let owner: TestOwner;
  let serviceUrl: string;
  let v2: Seller;
  let v1: Seller;
  let lowerCase: Seller;
  let wrongDomain: Seller;
  const payTo = privateKeyToAccount(ANVIL_KEYS[2]).address;

  beforeAll(async () => {
    world = await startWorld((binary as { path: string }).path);
    svc = await createTestService({ env: world.env });
    serviceUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
    owner = await createOwner(svc);
    v2 = await sellerV2(world, { payTo });
    v1 = await sellerV1(world, { payTo });
    lowerCase = await sellerV2(world, { payTo: payTo.toLowerCase() });
    // A seller that announces the token's EIP-712 domain wrongly: every payment made for it is refused.
    wrongDomain = await sellerV2(world, { payTo, extra: { name: 'USD Coin', version: '1' } });
  }, 120_000);

  afterAll(async () => {
    await Promise.all([v2, v1, lowerCase, wrongDomain].map((s) => s?.close()));
    await svc?.close();
    await world?.close();
  });

  it('@x402/fetch: registerBotPay in place of a key pays an x402 v2 seller; chain and ledger agree', async () => {
    const { bot, address, client } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const fetchWithPay = wrapFetchWithPayment(fetch, registerBotPay(new x402Client(), client));
    const res = await fetchWithPay(v2.url);
    expect(res.status, await res.clone().text()).toBe(200);
    expect(await res.json()).toEqual(WEATHER);
    expect(res.headers.get('payment-response')).toBeTruthy();
    expect(await world.token.balanceOf(address)).toBe(980_000n);
    // The approval is announced once the chain shows the payment, not at signing.
    expect(await eventTypes(svc, bot.bot_id)).not.toContain('purchase.approved');
    expect(await reconcileWallet(svc.ctx, bot.bot_id)).toMatchObject({ settled: 1 });
    expect(await eventTypes(svc, bot.bot_id)).toEqual(
      expect.arrayContaining(['purchase.approved', 'x402.settled']),
    );
    await expectChainMatchesLedger(world, svc, bot.bot_id, address);
  });

  it('@x402/axios: the same registration pays through an axios instance', async () => {
    const { bot, address, client } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const api = wrapAxiosWithPayment(axios.create(), registerBotPay(new AxiosX402Client(), client));
    const res = await api.get(v2.url);
    expect(res.status).toBe(200);
    expect(res.data).toEqual(WEATHER);
    expect(await world.token.balanceOf(address)).toBe(980_000n);
    await reconcileWallet(svc.ctx, bot.bot_id);
    await expectChainMatchesLedger(world, svc, bot.bot_id, address);
  });

  it('an x402 v1 seller (x402-express@1, base-sepolia) is paid through @x402/fetch, axios and the SDK', async () => {
    const { bot, address, client } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const unpaid = await fetch(v1.url);
    expect(unpaid.status).toBe(402);
    expect((await unpaid.json()).accepts[0]).toMatchObject({
      network: 'base-sepolia',
      maxAmountRequired: '20000',
    });

    const viaFetch = await wrapFetchWithPayment(fetch, registerBotPay(new x402Client(), client))(v1.url);
    expect(viaFetch.status, await viaFetch.clone().text()).toBe(200);
    expect(viaFetch.headers.get('x-payment-response')).toBeTruthy();
    const viaAxios = await wrapAxiosWithPayment(
      axios.create(),
      registerBotPay(new AxiosX402Client(), client),
    ).get(v1.url);
    expect(viaAxios.data).toEqual(WEATHER);
    const payments: Array<{ payment_header_name?: string; x402_version?: number }> = [];
    const viaSdk = await client.fetchWithX402(v1.url, {}, { onPayment: (p) => payments.push(p) });
    expect(viaSdk.status).toBe(200);
    expect(payments[0]).toMatchObject({ payment_header_name: 'X-PAYMENT', x402_version: 1 });

    expect(await world.token.balanceOf(address)).toBe(940_000n);
    expect(await reconcileWallet(svc.ctx, bot.bot_id)).toMatchObject({ settled: 3, lapsed: 0 });
    await expectChainMatchesLedger(world, svc, bot.bot_id, address);
    const rows = await svc.ctx.db.query<{ x402_version: number; network: string }>(
      'SELECT x402_version, network FROM x402_payments WHERE bot_id = $1',
      [bot.bot_id],
    );
    expect(rows.map((r) => [Number(r.x402_version), r.network])).toEqual([
      [1, 'eip155:84532'],
      [1, 'eip155:84532'],
      [1, 'eip155:84532'],
    ]);
  });

  it('a seller writing its payTo in lower case is paid (checked by checksum after normalising)', async () => {
    const unpaid = await fetch(lowerCase.url);
    const offered = JSON.parse(Buffer.from(unpaid.headers.get('payment-required')!, 'base64').toString());
    expect(offered.accepts[0].payTo).toBe(payTo.toLowerCase());
    const { bot, address, client } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const res = await wrapFetchWithPayment(fetch, registerBotPay(new x402Client(), client))(lowerCase.url);
    expect(res.status, await res.clone().text()).toBe(200);
    expect(await world.token.balanceOf(payTo)).toBeGreaterThan(0n);
    const row = (
      await svc.ctx.db.query<{ pay_to: string }>('SELECT pay_to FROM x402_payments WHERE bot_id = $1', [
        bot.bot_id,
      ])
    )[0]!;
    expect(row.pay_to).toBe(payTo);
    await reconcileWallet(svc.ctx, bot.bot_id);
    await expectChainMatchesLedger(world, svc, bot.bot_id, address);
  });

  it('a refusal by the service surfaces as a typed error carrying its code, from both clients', async () => {
    const { bot, client } = await fundedBot(world, svc, owner, serviceUrl, 100, { per_transaction_cents: 1 });
    const viaFetch = await wrapFetchWithPayment(
      fetch,
      registerBotPay(new x402Client(), client),
    )(v2.url).catch((e: unknown) => e);
    // The reference client wraps what the scheme threw in a plain Error; the code is in its message
    // and botPayErrorOf gives the service's error back.
    expect(viaFetch).toBeInstanceOf(Error);
    expect((viaFetch as Error).message).toMatch(/rail_guardrail_violation/);
    const typed = botPayErrorOf(viaFetch);
    expect(typed).toBeInstanceOf(BotPayError);
    expect(typed).toMatchObject({ code: 'rail_guardrail_violation', status: 403 });
    expect(typed!.details).toMatchObject({ limit: 'per_transaction' });
    expect(typed!.limitUsd).toBe(0.01);

    const viaAxios = await wrapAxiosWithPayment(axios.create(), registerBotPay(new AxiosX402Client(), client))
      .get(v2.url)
      .catch((e: unknown) => e);
    expect(isBotPayError(botPayErrorOf(viaAxios), 'rail_guardrail_violation')).toBe(true);
    const rows = await svc.ctx.db.query('SELECT 1 FROM x402_payments WHERE bot_id = $1', [bot.bot_id]);
    expect(rows).toHaveLength(0);
  });

  it('a seller that refuses the payment (wrong EIP-712 domain): released at once, x402.refused, never purchase.approved', async () => {
    const { bot, address, client } = await fundedBot(world, svc, owner, serviceUrl, 100);
    const res = await wrapFetchWithPayment(fetch, registerBotPay(new x402Client(), client))(wrongDomain.url);
    // The seller's facilitator refused the signature; the client hands its answer back as it is.
    expect(res.status).toBe(402);
    // The client reported the refusal (onPaymentResponse); the service's own facilitator check found
    // the authorisation can never be used, and released it before the answer came back.
    const payment = (
      await svc.ctx.db.query<{ id: string; status: string; refusal_reason: string }>(
        'SELECT id, status, refusal_reason FROM x402_payments WHERE bot_id = $1',
        [bot.bot_id],
      )
    )[0]!;
    expect(payment).toMatchObject({
      status: 'refused',
      refusal_reason: 'invalid_exact_evm_token_version_mismatch',
    });
    const wallet = (
      await svc.ctx.db.query<{ available_micros: string; authorized_micros: string }>(
        'SELECT available_micros, authorized_micros FROM x402_wallets WHERE bot_id = $1',
        [bot.bot_id],
      )
    )[0]!;
    expect([Number(wallet.available_micros), Number(wallet.authorized_micros)]).toEqual(
      [100, 0].map((c) => c * 10_000),
    );
    const types = await eventTypes(svc, bot.bot_id);
    expect(types).toContain('x402.refused');
    expect(types).not.toContain('purchase.approved');
    const refused = await svc.ctx.db.query<{ body: string }>(
      `SELECT body FROM events WHERE bot_id = $1 AND type = 'x402.refused'`,
      [bot.bot_id],
    );
    expect(JSON.parse(refused[0]!.body).data).toMatchObject({
      payment_id: payment.id,
      paid: false,
      amount: 0.02,
    });
    // The spend counters got it back: the rail's daily budget is whole again.
    const counters = await svc.ctx.db.query<{ day_micros: string }>(
      'SELECT day_micros FROM spend_windows WHERE scope = $1',
      [`x402:${bot.bot_id}`],
    );
    expect(Number(counters[0]!.day_micros)).toBe(0);
    expect(await client.x402Payment(payment.id)).toMatchObject({ payment_status: 'refused' });
    await reconcileWallet(svc.ctx, bot.bot_id);
    await expectChainMatchesLedger(world, svc, bot.bot_id, address);
  });
});
