import { encodePaymentSignatureHeader } from '@x402/core/http';
import type { PaymentPayload, PaymentRequirements, ResourceInfo } from '@x402/core/types';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { ExactEvmSchemeV1 } from '@x402/evm/exact/v1/client';
import { privateKeyToAccount } from 'viem/accounts';
import type { AppContext } from '../platform/context.ts';

// Signing a payment: the reference x402 client scheme (`exact` on EVM; its v1 variant for sellers
// on x402 v1) builds and signs the EIP-3009 transferWithAuthorization (EIP-712 typed data) with the
// wallet's key, decrypted here for this one call. Validity is short: the resource server's
// maxTimeoutSeconds, but never more than X402_MAX_VALIDITY_SECONDS. A v2 payload's `accepted` is
// the seller's own requirement exactly as offered, so the seller matches it; only the signed
// validBefore is shorter. A v1 payload is the v1 shape (scheme, network name, payload), sent as
// X-PAYMENT.

/** What a payment row keeps of the requirement it pays (x402_payments.requirements). */
export interface StoredRequirement {
  /** Normalised: the service's CAIP-2 network, checksummed addresses. */
  requirements: PaymentRequirements;
  /** The entry as the seller offered it (absent on rows from before x402 v1 support). */
  offered?: Record<string, unknown>;
  /** 1 for an x402 v1 seller; absent means 2. */
  x402Version?: 1 | 2;
  resource: ResourceInfo;
}

/** The x402 v1 payment payload (X-PAYMENT): no `accepted`, the network by its v1 name. */
export interface PaymentPayloadV1 {
  x402Version: 1;
  scheme: string;
  network: string;
  payload: Record<string, unknown>;
}

export interface SignedPayment {
  payload: PaymentPayload | PaymentPayloadV1;
  /** base64 of the payload: the value of the PAYMENT-SIGNATURE (v2) or X-PAYMENT (v1) header. */
  header: string;
  nonce: string;
  validBefore: number;
}

export async function signPayment(
  ctx: AppContext,
  keyEnc: string,
  stored: StoredRequirement,
): Promise<SignedPayment> {
  const maxValidity = ctx.config.x402?.maxValiditySeconds ?? 120;
  const account = privateKeyToAccount(ctx.secrets.decrypt(keyEnc) as `0x${string}`);
  const r = stored.requirements;
  const maxTimeoutSeconds = Math.min(r.maxTimeoutSeconds, maxValidity);
  let payload: PaymentPayload | PaymentPayloadV1;
  if (stored.x402Version === 1 && stored.offered) {
    // The v1 scheme reads the v1 field names and the network's v1 name (its chain id for EIP-712).
    const v1 = {
      ...stored.offered,
      payTo: r.payTo,
      asset: r.asset,
      maxTimeoutSeconds,
    } as unknown as PaymentRequirements;
    const partial = await new ExactEvmSchemeV1(account).createPaymentPayload(1, v1);
    payload = {
      x402Version: 1,
      scheme: partial.scheme,
      network: partial.network,
      payload: partial.payload,
    };
  } else {
    const partial = await new ExactEvmScheme(account).createPaymentPayload(2, { ...r, maxTimeoutSeconds });
    payload = {
      x402Version: 2,
      resource: stored.resource,
      accepted: (stored.offered ?? r) as PaymentRequirements,
      payload: partial.payload,
    };
  }
  const authorization = (payload.payload as { authorization: { nonce: string; validBefore: string } })
    .authorization;
  return {
    payload,
    header: encodePaymentSignatureHeader(payload as PaymentPayload),
    nonce: authorization.nonce,
    validBefore: Number(authorization.validBefore),
  };
}
