import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { x402Facilitator } from '@x402/core/facilitator';
import { HTTPFacilitatorClient } from '@x402/core/server';
import { toFacilitatorEvmSigner } from '@x402/evm';
import { ExactEvmScheme as FacilitatorScheme } from '@x402/evm/exact/facilitator';
import { ExactEvmScheme as ServerScheme } from '@x402/evm/exact/server';
import { ExactEvmSchemeV1 as FacilitatorSchemeV1 } from '@x402/evm/exact/v1/facilitator';
import { paymentMiddleware, x402ResourceServer } from '@x402/express';
import express from 'express';
import { createNonceManager, createWalletClient, http, publicActions } from 'viem';
import { jsonRpc } from 'viem/nonce';
import { privateKeyToAccount } from 'viem/accounts';
import { paymentMiddleware as paymentMiddlewareV1 } from 'x402-express';
import { expect } from 'vitest';
import { BotPayClient } from '../../packages/client/src/index.ts';
import { ledgerBalances } from '../../src/wallet/ledger.ts';
import { reconcileWallet } from '../../src/x402/reconcile.ts';
import { activeBot, type TestOwner, type TestService } from '../support/service.ts';
import { enableWallet } from './helpers.ts';
import {
  ANVIL_KEYS,
  compileToken,
  type DeployedToken,
  deployToken,
  type LocalChain,
  startAnvil,
} from './localChain.ts';

// Real sellers for the x402 client tests, on a local chain the test starts (anvil from its npm
// package) with the chain id of Base Sepolia (84532), so one chain serves x402 v2 sellers
// (`eip155:84532`, the reference @x402/express) and x402 v1 sellers (`base-sepolia`, x402-express@1)
// alike; a USDC-like EIP-3009 token compiled here; one facilitator from the reference packages
// (@x402/core + @x402/evm, v2 and v1 schemes) served over HTTP. The service under test runs with
// X402_NETWORK=base-sepolia against this chain. Nothing is mocked.

export const CHAIN_ID = 84532;
export const NETWORK = 'eip155:84532' as const;
export const V1_NETWORK = 'base-sepolia';
export const DOMAIN = { name: 'USD Coin', version: '2' };

export interface World {
  chain: LocalChain;
  token: DeployedToken;
  facilitatorUrl: string;
  /** The service's x402 settings for this chain. */
  env: Record<string, string>;
  close(): Promise<void>;
}

export async function startWorld(binary: string): Promise<World> {
  const compiled = await compileToken();
  const chain = await startAnvil(binary, CHAIN_ID);
  const token = await deployToken(chain, compiled);
  const facilitator = await startFacilitator(chain, (f, signer) =>
    f
      .register(NETWORK, new FacilitatorScheme(signer))
      .registerV1(V1_NETWORK as never, new FacilitatorSchemeV1(signer)),
  );
  return {
    chain,
    token,
    facilitatorUrl: facilitator.url,
    env: {
      X402_NETWORK: V1_NETWORK,
      X402_RPC_URL: chain.rpcUrl,
      X402_USDC_ADDRESS: token.address,
      X402_MAX_VALIDITY_SECONDS: '60',
      CHECKOUT_RATE_LIMIT_PER_HOUR: '1000',
    },
    async close() {
      await facilitator.close();
      await chain.stop();
    },
  };
}

/**
 * A facilitator built from the reference packages (@x402/core's x402Facilitator with the schemes
 * `register` adds), verifying and settling on chain with its own account (anvil's second key),
 * served over HTTP as sellers' middleware expects (/supported, /verify, /settle).
 */
export async function startFacilitator(
  chain: LocalChain,
  register: (f: x402Facilitator, signer: ReturnType<typeof toFacilitatorEvmSigner>) => x402Facilitator,
): Promise<{ url: string; close(): Promise<void> }> {
  // A nonce manager: settlements sent at once take consecutive nonces. Its own, for this chain:
  // viem's shared one remembers nonces per address and chain id across chains, and files that run
  // in one process (isolate: false) each start a chain of the same id from nonce 0.
  const account = privateKeyToAccount(ANVIL_KEYS[1], {
    nonceManager: createNonceManager({ source: jsonRpc() }),
  });
  const wallet = createWalletClient({ account, chain: chain.chain, transport: http(chain.rpcUrl) }).extend(
    publicActions,
  );
  const signer = toFacilitatorEvmSigner({
    address: account.address,
    readContract: (args) => wallet.readContract(args as never),
    verifyTypedData: (args) => wallet.verifyTypedData(args as never),
    writeContract: (args) => wallet.writeContract(args as never),
    sendTransaction: (args) => wallet.sendTransaction(args as never),
    waitForTransactionReceipt: (args) => wallet.waitForTransactionReceipt(args as never),
    getCode: (args) => wallet.getCode(args),
  });
  const facilitator = register(new x402Facilitator(), signer);
  const app = express();
  app.use(express.json());
  app.get('/supported', (_req, res) => {
    res.json(facilitator.getSupported());
  });
  app.post('/verify', async (req, res) => {
    res.json(await facilitator.verify(req.body.paymentPayload, req.body.paymentRequirements));
  });
  app.post('/settle', async (req, res) => {
    res.json(await facilitator.settle(req.body.paymentPayload, req.body.paymentRequirements));
  });
  const server = await listen(app);
  return { url: `http://127.0.0.1:${port(server)}`, close: () => close(server) };
}

export interface Seller {
  /** The paid resource's URL, e.g. http://127.0.0.1:PORT/weather. */
  url: string;
  origin: string;
  close(): Promise<void>;
}

export interface SellerOptions {
  payTo: string;
  /** Atomic units (micro-USDC); default 20000 ($0.02). */
  amount?: string;
  /** The token's EIP-712 domain as the seller announces it (default the token's own). */
  extra?: { name: string; version: string };
  path?: string;
  method?: 'GET' | 'POST';
  /** The host name in the URL handed out (default 127.0.0.1; `localhost` reaches the same server). */
  host?: string;
}

const RESOURCE = { forecast: 'sunny', temperature_c: 21 };

/** A seller behind the reference x402 v2 middleware (@x402/express). */
export async function sellerV2(world: World, o: SellerOptions): Promise<Seller> {
  const path = o.path ?? '/weather';
  const method = o.method ?? 'GET';
  const app = express();
  app.use(express.json());
  const server = new x402ResourceServer(new HTTPFacilitatorClient({ url: world.facilitatorUrl })).register(
    NETWORK,
    new ServerScheme(),
  );
  app.use(
    paymentMiddleware(
      {
        [`${method} ${path}`]: {
          accepts: {
            scheme: 'exact',
            network: NETWORK,
            payTo: o.payTo,
            price: { asset: world.token.address, amount: o.amount ?? '20000', extra: o.extra ?? DOMAIN },
            maxTimeoutSeconds: 300,
          },
          description: 'Weather report',
          mimeType: 'application/json',
        },
      },
      server,
    ),
  );
  app[method === 'GET' ? 'get' : 'post'](path, (req, res) => {
    res.json({ ...RESOURCE, ...(method === 'POST' ? { echo: req.body } : {}) });
  });
  return serve(app, path, o.host);
}

/** A seller behind the x402 v1 middleware (x402-express@1): network `base-sepolia`, header X-PAYMENT. */
export async function sellerV1(world: World, o: SellerOptions): Promise<Seller> {
  const path = o.path ?? '/weather';
  const app = express();
  app.use(
    paymentMiddlewareV1(
      o.payTo as `0x${string}`,
      {
        [`GET ${path}`]: {
          price: {
            amount: o.amount ?? '20000',
            asset: { address: world.token.address, decimals: 6, eip712: o.extra ?? DOMAIN },
          },
          network: V1_NETWORK as 'base-sepolia',
          config: { description: 'Weather report (v1)', mimeType: 'application/json' },
        },
      },
      { url: world.facilitatorUrl as `${string}://${string}` },
    ),
  );
  app.get(path, (_req, res) => {
    res.json(RESOURCE);
  });
  return serve(app, path, o.host);
}

export const WEATHER = RESOURCE;

async function serve(app: express.Express, path: string, host = '127.0.0.1'): Promise<Seller> {
  const server = await listen(app);
  const origin = `http://${host}:${port(server)}`;
  return { url: `${origin}${path}`, origin, close: () => close(server) };
}

/** A bot with the partner wallet on, funded on chain with `cents` and credited by the reconciler. */
export async function fundedBot(
  world: World,
  svc: TestService,
  owner: TestOwner,
  serviceUrl: string,
  cents: number,
  settings: Record<string, unknown> = {},
) {
  const bot = await activeBot(svc, owner);
  const { address } = await enableWallet(svc, owner, bot.bot_id, settings);
  await world.token.mint(address, BigInt(cents) * 10_000n);
  const r = await reconcileWallet(svc.ctx, bot.bot_id);
  expect(r?.depositedMicros).toBe(cents * 10_000);
  const client = new BotPayClient({ baseUrl: serviceUrl, apiKey: bot.api_key });
  return { bot, address, client };
}

/** The chain and the ledger agree to the micro-USDC, and the ledger balances. */
export async function expectChainMatchesLedger(
  world: World,
  svc: TestService,
  botId: string,
  address: string,
) {
  const onChain = await world.token.balanceOf(address);
  const l = await ledgerBalances(svc.ctx.db, botId);
  expect(BigInt(l.x402_available + l.x402_held + l.x402_authorized)).toBe(onChain);
  expect(-l.x402_deposits - l.x402_paid).toBe(l.x402_available + l.x402_held + l.x402_authorized);
}

export async function eventTypes(svc: TestService, botId: string): Promise<string[]> {
  const rows = await svc.ctx.db.query<{ type: string }>(
    'SELECT type FROM events WHERE bot_id = $1 ORDER BY seq',
    [botId],
  );
  return rows.map((r) => r.type);
}

export function listen(app: express.Express): Promise<Server> {
  return new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
}

export function port(s: Server): number {
  return (s.address() as AddressInfo).port;
}

export function close(s: Server | undefined): Promise<void> {
  return new Promise((resolve) => (s ? s.close(() => resolve()) : resolve()));
}
