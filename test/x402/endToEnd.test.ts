import type { Server } from 'node:http';
import { BotPayClient, isBotPayError } from '../../packages/client/src/index.ts';
import { HTTPFacilitatorClient } from '@x402/core/server';
import { ExactEvmScheme as FacilitatorScheme } from '@x402/evm/exact/facilitator';
import { ExactEvmScheme as ServerScheme } from '@x402/evm/exact/server';
import { paymentMiddleware, x402ResourceServer } from '@x402/express';
import express from 'express';
import { type Address, createWalletClient, erc20Abi, http, publicActions } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPostgres } from '../support/db.ts';
import { ledgerBalances } from '../../src/wallet/ledger.ts';
import { x402Reconcile } from '../../src/x402/job.ts';
import { reconcileWallet } from '../../src/x402/reconcile.ts';
import { close, listen, port, startFacilitator } from './world.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';
import {
  ANVIL_KEYS,
  anvilBinary,
  compileToken,
  type DeployedToken,
  deployToken,
  type LocalChain,
  startAnvil,
} from './localChain.ts';

// The whole x402 path with real parts on a local EVM chain the test starts (anvil from its npm
// package): a USDC-like EIP-3009 token compiled here from Solidity; a resource server behind the
// reference Express middleware (@x402/express) that answers 402; a facilitator built from the
// reference packages (@x402/core facilitator + @x402/evm exact scheme with a viem wallet) served
// over HTTP; the service on a real port; the bot through the SDK. Nothing is mocked.

const binary = anvilBinary();
if ('reason' in binary) console.warn(`x402 end-to-end tests skipped: ${binary.reason}`);

const NETWORK = 'eip155:31337' as const;
const PRICE = '20000'; // $0.02
const TINY_PRICE = '1000'; // $0.001
// 1,000 payments on PostgreSQL (the leg where they run 25 at a time on separate connections); the
// embedded leg runs the same path 200 times: the sums are the same SQL, and 1,000 payments there
// cost the suite two minutes on a 2-core machine.
const TINY_PAYMENTS = isPostgres ? 1_000 : 200;
/** What they move, in micro-USDC (= micro-dollars): $0.001 each. */
const TINY_SPENT = TINY_PAYMENTS * 1_000;
/** The partner wallet's deposit in this test: $2. */
const TINY_DEPOSIT = 2_000_000;

describe.runIf('path' in binary)('x402 end to end on a local chain', () => {
  let chain: LocalChain;
  let token: DeployedToken;
  let svc: TestService;
  let owner: TestOwner;
  let serviceUrl: string;
  let facilitator: Awaited<ReturnType<typeof startFacilitator>>;
  let resourceServer: Server;
  let resourceUrl: string;
  let tinyUrl: string;
  const payTo = privateKeyToAccount(ANVIL_KEYS[2]).address;
  const tinyPayTo = '0x90F79bf6EB2c4f870365E785982E1f101E93b906'; // a seller's address of its own

  beforeAll(async () => {
    const compiled = await compileToken();
    chain = await startAnvil((binary as { path: string }).path);
    token = await deployToken(chain, compiled);

    svc = await createTestService({
      env: {
        X402_NETWORK: NETWORK,
        X402_RPC_URL: chain.rpcUrl,
        X402_USDC_ADDRESS: token.address,
        X402_MAX_VALIDITY_SECONDS: '60',
        X402_RECONCILE_SECONDS: '1',
        CHECKOUT_RATE_LIMIT_PER_HOUR: '5000',
      },
    });
    serviceUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
    owner = await createOwner(svc);

    // The facilitator: verifies and settles on chain with its own account (anvil's second key).
    facilitator = await startFacilitator(chain, (f, signer) =>
      f.register(NETWORK, new FacilitatorScheme(signer)),
    );

    // The resource server: 402 until paid, through the reference middleware.
    const rApp = express();
    const server = new x402ResourceServer(new HTTPFacilitatorClient({ url: facilitator.url })).register(
      NETWORK,
      new ServerScheme(),
    );
    rApp.use(
      paymentMiddleware(
        {
          'GET /weather': {
            accepts: {
              scheme: 'exact',
              network: NETWORK,
              payTo,
              price: { asset: token.address, amount: PRICE, extra: { name: 'USD Coin', version: '2' } },
              maxTimeoutSeconds: 300,
            },
            description: 'Weather report',
            mimeType: 'application/json',
          },
          'GET /tiny': {
            accepts: {
              scheme: 'exact',
              network: NETWORK,
              payTo: tinyPayTo,
              price: { asset: token.address, amount: TINY_PRICE, extra: { name: 'USD Coin', version: '2' } },
              maxTimeoutSeconds: 300,
            },
            description: 'One tenth of a cent',
            mimeType: 'application/json',
          },
        },
        server,
      ),
    );
    rApp.get('/weather', (_req, res) => {
      res.json({ forecast: 'sunny', temperature_c: 21 });
    });
    rApp.get('/tiny', (_req, res) => {
      res.json({ ok: true });
    });
    resourceServer = await listen(rApp);
    resourceUrl = `http://127.0.0.1:${port(resourceServer)}/weather`;
    tinyUrl = `http://127.0.0.1:${port(resourceServer)}/tiny`;
  }, 120_000);

  afterAll(async () => {
    await Promise.all([close(resourceServer), facilitator?.close()]);
    await svc?.close();
    await chain?.stop();
  });

  async function fundedBot(cents: number, settings: Record<string, unknown> = {}) {
    const bot = await activeBot(svc, owner);
    const on = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active' },
    });
    expect(on.statusCode, on.body).toBe(200);
    const address = on.json().address as string;
    if (Object.keys(settings).length > 0) {
      const patch = await svc.app.inject({
        method: 'PATCH',
        url: `/api/v1/owner/bots/${bot.bot_id}/x402`,
        headers: owner.auth,
        payload: settings,
      });
      expect(patch.statusCode, patch.body).toBe(200);
    }
    // The owner funds the address on chain; the service notices on its next read.
    await token.mint(address, BigInt(cents) * 10_000n);
    const r = await reconcileWallet(svc.ctx, bot.bot_id);
    expect(r?.depositedMicros).toBe(cents * 10_000);
    const client = new BotPayClient({ baseUrl: serviceUrl, apiKey: bot.api_key });
    return { bot, address, client };
  }

  /** The chain and the ledger agree to the micro-USDC (one ledger micro is one atomic unit). */
  async function expectChainMatchesLedger(botId: string, address: string) {
    const onChain = await token.balanceOf(address);
    const l = await ledgerBalances(svc.ctx.db, botId);
    expect(BigInt(l.x402_available + l.x402_held + l.x402_authorized)).toBe(onChain);
    expect(-l.x402_deposits - l.x402_paid).toBe(l.x402_available + l.x402_held + l.x402_authorized);
  }

  it('the bot pays a 402 through the SDK; the resource server settles; chain and ledger agree', async () => {
    const { bot, address, client } = await fundedBot(100);
    const status = await client.status();
    expect(status.rails.partner_wallet).toMatchObject({ status: 'active', address, balance_usd: 1 });
    expect(status.rails.partner_wallet?.balance_read_at).toEqual(expect.any(String));

    const unpaid = await fetch(resourceUrl);
    expect(unpaid.status).toBe(402);
    expect(unpaid.headers.get('payment-required')).toBeTruthy();

    const payments: unknown[] = [];
    const res = await client.fetchWithX402(resourceUrl, {}, { onPayment: (p) => payments.push(p) });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(await res.json()).toEqual({ forecast: 'sunny', temperature_c: 21 });
    expect(res.headers.get('payment-response')).toBeTruthy();
    expect(payments).toHaveLength(1);
    const paymentId = (payments[0] as { payment_id: string }).payment_id;

    // On chain: the wallet paid $0.02 to the resource server's address.
    expect(await token.balanceOf(address)).toBe(980_000n);
    expect(await token.balanceOf(payTo)).toBe(20_000n);
    // The reconciliation job sees the authorisation used and records the transaction.
    const r = await reconcileWallet(svc.ctx, bot.bot_id);
    expect(r).toMatchObject({ settled: 1, lapsed: 0, depositedMicros: 0, deficitMicro: 0n });
    const poll = await client.x402Payment(paymentId);
    expect(poll).toMatchObject({
      status: 'approved',
      payment_status: 'settled',
      tx_hash: expect.stringMatching(/^0x[0-9a-f]{64}$/),
    });
    const receipt = await createWalletClient({ chain: chain.chain, transport: http(chain.rpcUrl) })
      .extend(publicActions)
      .getTransactionReceipt({ hash: poll.tx_hash as `0x${string}` });
    expect(receipt.status).toBe('success');
    const l = await ledgerBalances(svc.ctx.db, bot.bot_id);
    expect(l).toMatchObject({
      x402_deposits: -1_000_000,
      x402_available: 980_000,
      x402_held: 0,
      x402_authorized: 0,
      x402_paid: 20_000,
    });
    await expectChainMatchesLedger(bot.bot_id, address);
    const listed = await svc.app.inject({
      method: 'GET',
      url: `/api/v1/owner/bots/${bot.bot_id}/x402/payments`,
      headers: owner.auth,
    });
    expect(listed.json().payments[0]).toMatchObject({
      payment_id: paymentId,
      status: 'settled',
      tx_hash: poll.tx_hash,
    });
    const events = await svc.ctx.db.query<{ type: string }>(
      'SELECT type FROM events WHERE bot_id = $1 ORDER BY created_at',
      [bot.bot_id],
    );
    expect(events.map((e) => e.type)).toEqual(
      expect.arrayContaining(['x402.funded', 'purchase.approved', 'x402.settled']),
    );
  });

  it(`a $0.001 resource paid ${TINY_PAYMENTS} times: chain, ledger, partner wallet, counters and the master budget agree to the micro`, async () => {
    const { bot, address, client } = await fundedBot(TINY_DEPOSIT / 10_000, { per_transaction_cents: 1 });
    const ownerBudget = async () => {
      const rows = await svc.ctx.db.query<{ day: string; month: string }>(
        'SELECT day_micros::text AS day, month_micros::text AS month FROM spend_windows WHERE scope = $1',
        [`owner:${owner.id}`],
      );
      return { day: Number(rows[0]?.day ?? 0), month: Number(rows[0]?.month ?? 0) };
    };
    const before = await ownerBudget();
    const sellerBefore = await token.balanceOf(tinyPayTo);
    // The bot pays through the SDK (402 → the service signs → the seller's facilitator settles on
    // chain), 25 at a time. (Before the test that moves the chain's clock ahead of the service's.)
    let next = 0;
    const worker = async () => {
      while (next < TINY_PAYMENTS) {
        next++;
        const res = await client.fetchWithX402(tinyUrl);
        const why = res.headers.get('payment-required');
        expect(res.status, why ? Buffer.from(why, 'base64').toString() : await res.text()).toBe(200);
      }
    };
    await Promise.all(Array.from({ length: 25 }, worker));
    // The chain: what was paid moved, to the micro-USDC.
    expect(await token.balanceOf(address)).toBe(BigInt(TINY_DEPOSIT - TINY_SPENT));
    expect((await token.balanceOf(tinyPayTo)) - sellerBefore).toBe(BigInt(TINY_SPENT));
    // The reconciliation records every settlement.
    let settled = 0;
    for (let i = 0; i < 20 && settled < TINY_PAYMENTS; i++) {
      settled += (await reconcileWallet(svc.ctx, bot.bot_id))?.settled ?? 0;
      await chain.rpc('evm_mine');
    }
    expect(settled).toBe(TINY_PAYMENTS);
    // The ledger and the partner wallet's figures.
    const l = await ledgerBalances(svc.ctx.db, bot.bot_id);
    expect(l).toMatchObject({
      x402_deposits: -TINY_DEPOSIT,
      x402_available: TINY_DEPOSIT - TINY_SPENT,
      x402_held: 0,
      x402_authorized: 0,
      x402_paid: TINY_SPENT,
    });
    await expectChainMatchesLedger(bot.bot_id, address);
    const [wallet] = await svc.ctx.db.query<Record<string, string>>(
      `SELECT available_micros::text AS available, held_micros::text AS held, authorized_micros::text AS authorized
         FROM x402_wallets WHERE bot_id = $1`,
      [bot.bot_id],
    );
    expect(wallet).toEqual({ available: String(TINY_DEPOSIT - TINY_SPENT), held: '0', authorized: '0' });
    const [payments] = await svc.ctx.db.query<{ n: number; micros: string; settled: number }>(
      `SELECT count(*)::int AS n, sum(amount_micros)::text AS micros,
              count(*) FILTER (WHERE status = 'settled')::int AS settled
         FROM x402_payments WHERE bot_id = $1`,
      [bot.bot_id],
    );
    expect(payments).toEqual({ n: TINY_PAYMENTS, micros: String(TINY_SPENT), settled: TINY_PAYMENTS });
    // The rail's counters, the bot's and the owner's master budget: each exactly what was paid more.
    const windows = await svc.ctx.db.query<{ scope: string; day: string; month: string }>(
      `SELECT scope, day_micros::text AS day, month_micros::text AS month FROM spend_windows
        WHERE scope IN ($1, $2) ORDER BY scope`,
      [`x402:${bot.bot_id}`, `bot:${bot.bot_id}`],
    );
    expect(windows).toEqual([
      { scope: `bot:${bot.bot_id}`, day: '0', month: String(TINY_SPENT) },
      { scope: `x402:${bot.bot_id}`, day: String(TINY_SPENT), month: String(TINY_SPENT) },
    ]);
    const after = await ownerBudget();
    expect({ day: after.day - before.day, month: after.month - before.month }).toEqual({
      day: TINY_SPENT,
      month: TINY_SPENT,
    });
    // What the owner and the bot read: $0.001 a payment, the rest left in the partner wallet.
    const listed = await svc.app.inject({
      method: 'GET',
      url: `/api/v1/owner/bots/${bot.bot_id}/x402/payments?limit=1`,
      headers: owner.auth,
    });
    expect(listed.json().payments[0]).toMatchObject({ amount_usd: 0.001, status: 'settled' });
    const status = await client.status();
    expect(status.rails.partner_wallet).toMatchObject({
      balance_usd: (TINY_DEPOSIT - TINY_SPENT) / 1_000_000,
    });
  }, 240_000);

  it('a held payment waits for the owner; after approval the bot gets the resource', async () => {
    const { bot, address, client } = await fundedBot(50, { approval_mode: 'ask_for_everything' });
    const pending = client.fetchWithX402(resourceUrl, {}, {});
    let approvalId: string | undefined;
    for (let i = 0; i < 100 && !approvalId; i++) {
      const inbox = await svc.app.inject({
        method: 'GET',
        url: '/api/v1/owner/approvals',
        headers: owner.auth,
      });
      approvalId = inbox
        .json()
        .approvals.find((a: { bot_id: string }) => a.bot_id === bot.bot_id)?.confirmation_id;
      if (!approvalId) await new Promise((r) => setTimeout(r, 50));
    }
    expect(approvalId).toBeDefined();
    const ok = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/approvals/${approvalId}/approve`,
      headers: owner.auth,
    });
    expect(ok.statusCode, ok.body).toBe(200);
    // The SDK polls every 5 s in its first minute; this answer arrives at the next poll.
    const res = await pending;
    expect(res.status).toBe(200);
    await reconcileWallet(svc.ctx, bot.bot_id);
    await expectChainMatchesLedger(bot.bot_id, address);
  }, 30_000);

  it('an authorisation never used comes back after it expires; the budget is given back too', async () => {
    const { bot, address, client } = await fundedBot(100, { daily_cents: 2, per_transaction_cents: 2 });
    const unpaid = await fetch(resourceUrl);
    const required = JSON.parse(Buffer.from(unpaid.headers.get('payment-required')!, 'base64').toString());
    const paid = await client.payX402({ resource_url: resourceUrl, payment_requirements: required.accepts });
    expect(paid.approved).toBe(true);
    // The bot never uses it. The daily limit is taken meanwhile.
    await expect(
      client.payX402({ resource_url: resourceUrl, payment_requirements: required.accepts }),
    ).rejects.toSatisfy((e) => isBotPayError(e) && e.code === 'rail_guardrail_violation');
    let r = await reconcileWallet(svc.ctx, bot.bot_id);
    expect(r).toMatchObject({ settled: 0, lapsed: 0 });
    // Chain time passes the signed validBefore (at most X402_MAX_VALIDITY_SECONDS = 60 s).
    await chain.rpc('evm_increaseTime', [120]);
    await chain.rpc('evm_mine');
    r = await reconcileWallet(svc.ctx, bot.bot_id);
    expect(r).toMatchObject({ settled: 0, lapsed: 1 });
    const poll = await client.x402Payment(paid.payment_id);
    expect(poll).toMatchObject({ payment_status: 'lapsed' });
    expect(poll.payment_header).toBeUndefined();
    const l = await ledgerBalances(svc.ctx.db, bot.bot_id);
    expect(l).toMatchObject({ x402_available: 1_000_000, x402_authorized: 0, x402_paid: 0 });
    await expectChainMatchesLedger(bot.bot_id, address);
    // The budget is free again. (Not used here: the chain's clock now runs 120 s ahead of ours.)
    const again = await client.payX402({ resource_url: resourceUrl, payment_requirements: required.accepts });
    expect(again.approved).toBe(true);
  });

  it('the x402-reconcile background job credits a deposit by itself', async () => {
    const bot = await activeBot(svc, owner);
    const on = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active' },
    });
    await token.mint(on.json().address, 250_000n);
    const job = await x402Reconcile.start(svc.ctx);
    try {
      let available = 0;
      for (let i = 0; i < 100 && available === 0; i++) {
        await new Promise((r) => setTimeout(r, 100));
        available = (await ledgerBalances(svc.ctx.db, bot.bot_id)).x402_available;
      }
      expect(available).toBe(250_000);
    } finally {
      await job.stop();
    }
  });

  it('two reconcilers at once credit a deposit once', async () => {
    const bot = await activeBot(svc, owner);
    const on = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active' },
    });
    await token.mint(on.json().address, 70_000n);
    const results = await Promise.all([0, 1, 2].map(() => reconcileWallet(svc.ctx, bot.bot_id)));
    expect(results.reduce((sum, r) => sum + (r?.depositedMicros ?? 0), 0)).toBe(70_000);
    expect((await ledgerBalances(svc.ctx.db, bot.bot_id)).x402_available).toBe(70_000);
  });

  it('money that leaves the wallet outside the service raises an owner alert', async () => {
    const { bot, address } = await fundedBot(100);
    // Someone with the key (an imported key used elsewhere) moves money out directly.
    const keyEnc = (
      await svc.ctx.db.query<{ key_enc: string }>('SELECT key_enc FROM x402_wallets WHERE bot_id = $1', [
        bot.bot_id,
      ])
    )[0]!.key_enc;
    const thief = privateKeyToAccount(svc.ctx.secrets.decrypt(keyEnc) as `0x${string}`);
    const minter = createWalletClient({
      account: privateKeyToAccount(ANVIL_KEYS[0]),
      chain: chain.chain,
      transport: http(chain.rpcUrl),
    }).extend(publicActions);
    await minter.waitForTransactionReceipt({
      hash: await minter.sendTransaction({
        to: address as Address,
        value: 10n ** 16n,
        chain: chain.chain,
        account: privateKeyToAccount(ANVIL_KEYS[0]),
      }),
    });
    const w = createWalletClient({
      account: thief,
      chain: chain.chain,
      transport: http(chain.rpcUrl),
    }).extend(publicActions);
    await w.waitForTransactionReceipt({
      hash: await w.writeContract({
        address: token.address,
        abi: erc20Abi,
        functionName: 'transfer',
        args: [payTo, 300_000n],
        chain: chain.chain,
        account: thief,
      }),
    });
    const sentBefore = svc.mailer.sent.length;
    const r = await reconcileWallet(svc.ctx, bot.bot_id);
    expect(r?.deficitMicro).toBe(300_000n);
    const events = await svc.ctx.db.query<{ type: string; body: string }>(
      `SELECT type, body FROM events WHERE bot_id = $1 AND type = 'x402.balance_mismatch'`,
      [bot.bot_id],
    );
    expect(events).toHaveLength(1);
    expect(JSON.parse(events[0]!.body).data).toMatchObject({
      chain_balance: 0.7,
      ledger_balance: 1,
      missing: 0.3,
    });
    expect(svc.mailer.sent.length).toBe(sentBefore + 1);
    expect(svc.mailer.sent.at(-1)!.subject).toMatch(/holds less than expected/);
    // The same deficit is not reported again at the next block.
    await chain.rpc('evm_mine');
    await reconcileWallet(svc.ctx, bot.bot_id);
    expect(svc.mailer.sent.length).toBe(sentBefore + 1);
  });
});
