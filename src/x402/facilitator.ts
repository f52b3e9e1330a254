import type { FacilitatorEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator';
import { ExactEvmSchemeV1 } from '@x402/evm/exact/v1/facilitator';
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import { type Address, type Hex, parseAbi } from 'viem';
import type { X402Config } from '../config.ts';
import { chainClient } from './chain.ts';
import type { PaymentPayloadV1, StoredRequirement } from './sign.ts';

// The reference facilitator's verification (@x402/evm's exact scheme, v2 or v1), run by the service
// against its own RPC with a signer that can only read: whether a signed authorisation could move
// money on chain now, and if not, why. Loaded where called (src/x402/refusal.ts), like sign.ts.

/**
 * Reasons that hold for good: the signature does not match the token's EIP-712 domain, the payee or
 * amount differ, the token has no EIP-3009. Such an authorisation can never be used. Anything else
 * (balance too low, simulation failure, validity about to end, already used) may change, or is the
 * chain's to tell (reconcile.ts).
 */
export const LASTING_REASONS: ReadonlySet<string> = new Set([
  'invalid_exact_evm_signature',
  'invalid_exact_evm_token_name_mismatch',
  'invalid_exact_evm_token_version_mismatch',
  'invalid_exact_evm_recipient_mismatch',
  'invalid_exact_evm_network_mismatch',
  'invalid_exact_evm_scheme',
  'invalid_exact_evm_missing_eip712_domain',
  'invalid_exact_evm_eip3009_not_supported',
  'invalid_exact_evm_authorization_value',
  'invalid_exact_evm_payload_authorization_value_mismatch',
  'invalid_exact_evm_failed_to_parse_signature',
]);

const DOMAIN_ABI = parseAbi([
  'function name() view returns (string)',
  'function version() view returns (string)',
]);

export interface Verdict {
  valid: boolean;
  reason: string | null;
  /** True when the authorisation can never be used (a lasting reason). */
  neverUsable: boolean;
}

function readOnlySigner(cfg: X402Config, address: string): FacilitatorEvmSigner {
  const client = chainClient(cfg);
  const cannot = async (): Promise<never> => {
    throw new Error('the service only reads the chain');
  };
  return {
    getAddresses: () => [address as Hex],
    readContract: (args) => client.readContract(args as never),
    verifyTypedData: (args) => client.verifyTypedData(args as never),
    getCode: (args) => client.getCode(args),
    writeContract: cannot,
    sendTransaction: cannot,
    waitForTransactionReceipt: cannot,
  };
}

export async function verifyAuthorization(
  cfg: X402Config,
  payFrom: string,
  stored: StoredRequirement,
  payload: PaymentPayload | PaymentPayloadV1,
): Promise<Verdict> {
  const signer = readOnlySigner(cfg, payFrom);
  let result: { isValid: boolean; invalidReason?: string | undefined };
  if (payload.x402Version === 1 && stored.offered) {
    const v1 = { ...stored.offered, payTo: stored.requirements.payTo, asset: stored.requirements.asset };
    result = await new ExactEvmSchemeV1(signer).verify(
      payload as unknown as PaymentPayload,
      v1 as unknown as PaymentRequirements,
    );
  } else {
    result = await new ExactEvmScheme(signer).verify(payload as PaymentPayload, stored.requirements);
  }
  let reason = result.isValid ? null : (result.invalidReason ?? 'invalid');
  if (reason !== null && !LASTING_REASONS.has(reason)) {
    // The reference diagnosis reads the token through Multicall3, which not every chain has: the
    // token's EIP-712 name and version are read here one by one, as the signature was made for them.
    reason = (await domainMismatch(cfg, stored)) ?? reason;
  }
  return { valid: result.isValid, reason, neverUsable: reason !== null && LASTING_REASONS.has(reason) };
}

async function domainMismatch(cfg: X402Config, stored: StoredRequirement): Promise<string | null> {
  const client = chainClient(cfg);
  const extra = (stored.requirements.extra ?? {}) as { name?: unknown; version?: unknown };
  const read = (functionName: 'name' | 'version') =>
    client
      .readContract({ address: stored.requirements.asset as Address, abi: DOMAIN_ABI, functionName })
      .catch(() => null);
  const [name, version] = await Promise.all([read('name'), read('version')]);
  if (name !== null && name !== extra.name) return 'invalid_exact_evm_token_name_mismatch';
  if (version !== null && version !== extra.version) return 'invalid_exact_evm_token_version_mismatch';
  return null;
}
