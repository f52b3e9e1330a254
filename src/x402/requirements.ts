import type { PaymentRequirements } from '@x402/core/types';
import type { X402Config } from '../config.ts';
import { validationError } from '../platform/errors.ts';
import { type Evm, loadEvm } from './evm.ts';

// What a bot hands over from a 402 response, checked before anything is signed. x402 v2 amounts
// are strings of atomic units; USDC has 6 decimals, so 1 unit is one micro-USDC ($0.000001).
//
// Amounts and micros: the ledger, the limits and the owner's budgets count micro-dollars (migration
// 0050), and one micro-USDC is one micro-dollar, so every whole amount of atomic units is paid as it
// is: $0.001 is "1000", $0.01 is "10000", "12345" is $0.012345. An amount with a fraction of a
// micro-USDC ("1.5", "0.0000001") cannot exist on chain nor in the ledger and is refused with a 400
// that says so, never rounded: rounding would make the ledger and the chain disagree.

/** The largest single payment the service will sign: $100 000, like a checkout's amount_cents limit. */
export const MAX_AMOUNT_MICROS = 100_000_000_000;

export interface CheckedRequirement {
  /** 1 for an x402 v1 requirement (a network name such as `base-sepolia`, `maxAmountRequired`), else 2. */
  x402Version: 1 | 2;
  /** The entry exactly as the seller offered it: echoed as the v2 payload's `accepted`, which the seller matches. */
  offered: Record<string, unknown>;
  /** The entry normalised for signing: the service's CAIP-2 network, checksummed addresses, the amount. */
  requirements: PaymentRequirements;
  amountMicro: bigint;
  amountMicros: number;
  payTo: string;
}

/** The request header that carries a signed payment: x402 v2, and v1 (`X-PAYMENT`). */
export const PAYMENT_HEADER = 'PAYMENT-SIGNATURE';
export const PAYMENT_HEADER_V1 = 'X-PAYMENT';

export function paymentHeaderName(x402Version: number): typeof PAYMENT_HEADER | typeof PAYMENT_HEADER_V1 {
  return x402Version === 1 ? PAYMENT_HEADER_V1 : PAYMENT_HEADER;
}

/**
 * An address in any case, returned with its EIP-55 checksum. All lower (or all upper) case carries
 * no checksum and is normalised; mixed case is a checksum, and one that does not match is refused
 * (a mistyped address is caught rather than paid). Anything else is a 400 naming the field.
 */
export async function checksummed(value: unknown, field: string): Promise<string> {
  return checkAddress((await loadEvm()).getAddress, value, field);
}

function checkAddress(getAddress: Evm['getAddress'], value: unknown, field: string): string {
  if (typeof value !== 'string' || !/^0x[0-9a-fA-F]{40}$/.test(value)) {
    throw validationError(`${field} must be a 0x-prefixed 20-byte hex address.`, { field });
  }
  const canonical = getAddress(value.toLowerCase());
  const hex = value.slice(2);
  const mixedCase = hex !== hex.toLowerCase() && hex !== hex.toUpperCase();
  if (mixedCase && canonical !== value) {
    throw validationError(
      `${field} is written in mixed case but its EIP-55 checksum is wrong (expected ${canonical}): check the address.`,
      { field },
    );
  }
  return canonical;
}

/** An x402 amount string in micro-USDC → the amount (bigint, and micros as a number), or a 400 that says why not. */
export function parseAmount(amount: unknown, field = 'amount'): { micro: bigint; micros: number } {
  if (typeof amount !== 'string' || amount.length === 0 || amount.length > 40) {
    throw validationError(`${field} must be a string of atomic units (micro-USDC), e.g. "10000" for $0.01.`, {
      field,
    });
  }
  if (/^\d*\.\d+$/.test(amount) || /^\d+\.\d*$/.test(amount)) {
    throw validationError(
      `${field} has a fraction of a micro-USDC: x402 amounts are whole atomic units (1 = $0.000001).`,
      { field },
    );
  }
  if (!/^\d+$/.test(amount)) {
    throw validationError(`${field} must contain only digits (atomic units of USDC).`, { field });
  }
  const micro = BigInt(amount);
  if (micro <= 0n) throw validationError(`${field} must be greater than zero.`, { field });
  if (micro > BigInt(MAX_AMOUNT_MICROS)) {
    throw validationError(`${field} is above the largest payment the service signs ($100000).`, { field });
  }
  return { micro, micros: Number(micro) };
}

/**
 * Chooses the requirement to pay among those the 402 response offered: the first `exact` one on
 * the configured network and USDC contract. x402 v2 entries (CAIP-2 network, `amount`) and v1
 * entries (a network name such as `base-sepolia`, `maxAmountRequired`) are both understood. A list
 * where none fits is refused with the reason of each entry; a fitting entry with a bad field is
 * refused for that field.
 */
export async function chooseRequirement(cfg: X402Config, offered: unknown[]): Promise<CheckedRequirement> {
  const { getAddress, v1ChainIds } = await loadEvm();
  if (offered.length === 0)
    throw validationError('payment_requirements is empty.', { field: 'payment_requirements' });
  const reasons: string[] = [];
  for (const [i, raw] of offered.entries()) {
    const field = offered.length === 1 ? 'payment_requirements' : `payment_requirements[${i}]`;
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      reasons.push(`${field} is not an object`);
      continue;
    }
    const r = raw as Record<string, unknown>;
    if (r.scheme !== 'exact') {
      reasons.push(`${field}.scheme is ${JSON.stringify(r.scheme)}, only "exact" is supported`);
      continue;
    }
    if (typeof r.network !== 'string') {
      reasons.push(`${field}.network is missing`);
      continue;
    }
    const v1 = !r.network.includes(':');
    const chainId = v1 ? v1ChainIds[r.network] : undefined;
    if (v1 && chainId === undefined) {
      reasons.push(`${field}.network is ${JSON.stringify(r.network)}, not an EVM network x402 names`);
      continue;
    }
    const network = v1 ? `eip155:${chainId}` : r.network;
    if (network !== cfg.network) {
      const alias = v1 ? ` (${network})` : '';
      reasons.push(
        `${field}.network is ${JSON.stringify(r.network)}${alias}, this service pays on ${cfg.network}`,
      );
      continue;
    }
    const asset = checkAddress(getAddress, r.asset, `${field}.asset`);
    if (asset !== getAddress(cfg.usdcAddress)) {
      reasons.push(`${field}.asset is ${asset}, this service pays in USDC ${getAddress(cfg.usdcAddress)}`);
      continue;
    }
    return checkRequirement(getAddress, r, field, asset, network, v1 ? 1 : 2);
  }
  throw validationError(`No payment requirement this wallet can pay: ${reasons.join('; ')}.`, {
    field: 'payment_requirements',
    reasons,
  });
}

function checkRequirement(
  getAddress: Evm['getAddress'],
  r: Record<string, unknown>,
  field: string,
  asset: string,
  network: string,
  x402Version: 1 | 2,
): CheckedRequirement {
  const payTo = checkAddress(getAddress, r.payTo, `${field}.payTo`);
  // x402 v1 names the amount maxAmountRequired; v2 amount.
  const amountField = x402Version === 1 ? 'maxAmountRequired' : 'amount';
  const amount = r[amountField];
  const { micro, micros } = parseAmount(amount, `${field}.${amountField}`);
  const timeout = r.maxTimeoutSeconds;
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 10 || timeout > 86_400) {
    throw validationError(`${field}.maxTimeoutSeconds must be a whole number of seconds from 10 to 86400.`, {
      field: `${field}.maxTimeoutSeconds`,
    });
  }
  const extra = r.extra;
  if (typeof extra !== 'object' || extra === null || Array.isArray(extra)) {
    throw validationError(`${field}.extra must be an object with the token's EIP-712 name and version.`, {
      field: `${field}.extra`,
    });
  }
  const e = extra as Record<string, unknown>;
  if (typeof e.name !== 'string' || typeof e.version !== 'string' || !e.name || !e.version) {
    throw validationError(`${field}.extra.name and .version (the token's EIP-712 domain) are required.`, {
      field: `${field}.extra`,
    });
  }
  if (e.assetTransferMethod !== undefined && e.assetTransferMethod !== 'eip3009') {
    throw validationError(`${field}.extra.assetTransferMethod must be eip3009 (transferWithAuthorization).`, {
      field: `${field}.extra.assetTransferMethod`,
    });
  }
  return {
    x402Version,
    offered: r,
    requirements: {
      scheme: 'exact',
      network: network as PaymentRequirements['network'],
      asset,
      amount: amount as string,
      payTo,
      maxTimeoutSeconds: timeout,
      extra: e,
    },
    amountMicro: micro,
    amountMicros: micros,
    payTo,
  };
}

/** Whether a requirement offered by a 402 asks for exactly this payment (same network, asset, payee and amount). */
export async function offersSamePayment(
  cfg: X402Config,
  offered: unknown[],
  chosen: CheckedRequirement,
): Promise<boolean> {
  for (const entry of offered) {
    try {
      const c = await chooseRequirement(cfg, [entry]);
      if (
        c.payTo === chosen.payTo &&
        c.amountMicro === chosen.amountMicro &&
        c.requirements.asset === chosen.requirements.asset
      )
        return true;
    } catch {
      // An entry this wallet cannot pay is not this payment.
    }
  }
  return false;
}

/** The resource URL: absolute http(s); its host name (lower case) is what the domain lists match. */
export function resourceDomain(resourceUrl: string): string {
  let u: URL;
  try {
    u = new URL(resourceUrl);
  } catch {
    throw validationError('resource_url must be an absolute URL.', { field: 'resource_url' });
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') {
    throw validationError('resource_url must use http or https.', { field: 'resource_url' });
  }
  return u.hostname.toLowerCase();
}

/** Whether a host matches a list entry: exact, or "*.example.com" for any subdomain (not the apex). */
export function domainMatches(host: string, entry: string): boolean {
  if (entry.startsWith('*.')) return host.endsWith(entry.slice(1));
  return host === entry;
}
