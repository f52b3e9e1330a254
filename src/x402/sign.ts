import { encodePaymentSignatureHeader } from '@x402/core/http';
import type { PaymentPayload, PaymentRequirements, ResourceInfo } from '@x402/core/types';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { privateKeyToAccount } from 'viem/accounts';
import type { AppContext } from '../platform/context.ts';

// Signing a payment: the reference x402 client scheme (`exact` on EVM) builds and signs the
// EIP-3009 transferWithAuthorization (EIP-712 typed data) with the wallet's key, decrypted here for
// this one call. Validity is short: the resource server's maxTimeoutSeconds, but never more than
// X402_MAX_VALIDITY_SECONDS. The payload's `accepted` stays the server's own requirement, so the
// server matches it; only the signed validBefore is shorter.

export interface SignedPayment {
  payload: PaymentPayload;
  /** base64 of the payload: the value of the PAYMENT-SIGNATURE header. */
  header: string;
  nonce: string;
  validBefore: number;
}

export async function signPayment(
  ctx: AppContext,
  keyEnc: string,
  requirements: PaymentRequirements,
  resource: ResourceInfo,
): Promise<SignedPayment> {
  const maxValidity = ctx.config.x402?.maxValiditySeconds ?? 120;
  const account = privateKeyToAccount(ctx.secrets.decrypt(keyEnc) as `0x${string}`);
  const scheme = new ExactEvmScheme(account);
  const partial = await scheme.createPaymentPayload(2, {
    ...requirements,
    maxTimeoutSeconds: Math.min(requirements.maxTimeoutSeconds, maxValidity),
  });
  const payload: PaymentPayload = {
    x402Version: 2,
    resource,
    accepted: requirements,
    payload: partial.payload,
  };
  const authorization = (partial.payload as { authorization: { nonce: string; validBefore: string } })
    .authorization;
  return {
    payload,
    header: encodePaymentSignatureHeader(payload),
    nonce: authorization.nonce,
    validBefore: Number(authorization.validBefore),
  };
}
