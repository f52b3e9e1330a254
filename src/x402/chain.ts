import {
  type Address,
  createPublicClient,
  defineChain,
  type Hex,
  http,
  parseAbi,
  type PublicClient,
} from 'viem';
import type { X402Config } from '../config.ts';

// Reading the chain: the USDC balance of a wallet, whether an EIP-3009 authorisation was used, the
// transaction that used it. Everything is read at one block so a balance and the authorisation
// states it is compared with describe the same moment (src/x402/reconcile.ts).

export const USDC_ABI = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
]);

const clients = new Map<string, PublicClient>();

export function chainClient(cfg: X402Config): PublicClient {
  const key = `${cfg.chainId} ${cfg.rpcUrl}`;
  let client = clients.get(key);
  if (!client) {
    const chain = defineChain({
      id: cfg.chainId,
      name: cfg.network,
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [cfg.rpcUrl] } },
    });
    client = createPublicClient({ chain, transport: http(cfg.rpcUrl, { timeout: 10_000, retryCount: 1 }) });
    clients.set(key, client);
  }
  return client;
}

export interface BlockRef {
  number: bigint;
  /** Seconds since the epoch, the chain's own clock (what transferWithAuthorization checks). */
  timestamp: bigint;
}

export async function latestBlock(cfg: X402Config): Promise<BlockRef> {
  const block = await chainClient(cfg).getBlock({ blockTag: 'latest' });
  return { number: block.number, timestamp: block.timestamp };
}

export async function usdcBalance(cfg: X402Config, address: string, blockNumber?: bigint): Promise<bigint> {
  return chainClient(cfg).readContract({
    address: cfg.usdcAddress as Address,
    abi: USDC_ABI,
    functionName: 'balanceOf',
    args: [address as Address],
    ...(blockNumber === undefined ? {} : { blockNumber }),
  });
}

export async function authorizationUsed(
  cfg: X402Config,
  authorizer: string,
  nonce: string,
  blockNumber: bigint,
): Promise<boolean> {
  return chainClient(cfg).readContract({
    address: cfg.usdcAddress as Address,
    abi: USDC_ABI,
    functionName: 'authorizationState',
    args: [authorizer as Address, nonce as Hex],
    blockNumber,
  });
}

/** The transaction that used the authorisation (its AuthorizationUsed event), searched back from `toBlock`. */
export async function authorizationTx(
  cfg: X402Config,
  authorizer: string,
  nonce: string,
  toBlock: bigint,
  lookback = 100_000n,
): Promise<string | null> {
  const logs = await chainClient(cfg).getContractEvents({
    address: cfg.usdcAddress as Address,
    abi: USDC_ABI,
    eventName: 'AuthorizationUsed',
    args: { authorizer: authorizer as Address, nonce: nonce as Hex },
    fromBlock: toBlock > lookback ? toBlock - lookback : 0n,
    toBlock,
  });
  return logs[0]?.transactionHash ?? null;
}
