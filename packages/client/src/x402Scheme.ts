// The service as the wallet of the reference x402 clients (`@x402/fetch`, `@x402/axios`, or any
// x402Client from `@x402/core`): a scheme client for `exact` on EVM networks, x402 v2 and v1, in
// which the service signs. The bot keeps its code and its client; only the wallet changes:
//
//   import { wrapFetchWithPayment, x402Client } from '@x402/fetch';
//   const client = registerBotPay(new x402Client(), bot);   // instead of register(…, new ExactEvmScheme(key))
//   const fetchWithPay = wrapFetchWithPayment(fetch, client);
//
// Each payment goes through the service's guardrails (POST /api/v1/bot/x402/pay), waits for the
// owner when it is held, and the signed payload goes back to the x402 client, which sends it. A
// refusal rejects with the service's BotPayError; the reference clients wrap it in a plain Error
// ("Failed to create payment payload: <code>: …"), and botPayErrorOf(error) gives the typed error
// back. When the seller then refuses the payment (x402 v2 clients that have onPaymentResponse), the
// refusal is reported to the service, which checks it against the chain and releases the payment at
// once if the authorisation can never be used. No dependency on the x402 packages: the client is
// taken as it is.

import { BotPayError, isBotPayError } from './errors.ts';
import type { X402PaymentRequirements, X402PaymentStatus, X402PayRequest, X402PayResult } from './x402.ts';

/** The x402 v1 network names of EVM chains (as @x402/evm names them); the service pays on one of them. */
export const X402_V1_EVM_NETWORKS = [
  'base',
  'base-sepolia',
  'ethereum',
  'sepolia',
  'avalanche',
  'avalanche-fuji',
  'polygon',
  'polygon-amoy',
  'abstract',
  'abstract-testnet',
  'iotex',
  'sei',
  'sei-testnet',
  'peaq',
  'story',
  'educhain',
  'skale-base-sepolia',
  'megaeth',
  'monad',
  'stable',
  'stable-testnet',
  'celo',
  'flare',
] as const;

/** What the scheme needs of BotPayClient. */
export interface X402SchemePayer {
  payX402(
    request: X402PayRequest,
    options?: { signal?: AbortSignal; idempotencyKey?: string },
  ): Promise<X402PayResult>;
  waitForX402Payment(
    paymentId: string,
    options?: { signal?: AbortSignal; maxWaitMs?: number },
  ): Promise<X402PaymentStatus>;
  reportX402Refusal?(
    paymentId: string,
    report: { reason?: string; seller_status?: number },
  ): Promise<unknown>;
}

export interface BotPaySchemeOptions {
  /** Wait for the owner when the payment is held (default true); false rejects with `payment_held`. */
  waitForApproval?: boolean;
  /** Gives up waiting for the owner after this many ms. */
  maxWaitMs?: number;
  /** Called with the service's answer for each payment (for logging). */
  onPayment?: (payment: X402PayResult | X402PaymentStatus) => void;
  /**
   * Keep the x402 client's own spend controls (@x402/core 2.2x: $1 a payment, known USDC contracts
   * only). Default false: registerBotPay turns them off, because the owner's guardrails on the
   * service decide what is paid.
   */
  keepSpendControls?: boolean;
}

/** The part of a 402 answer the scheme reads (x402 `PaymentRequired`). */
interface PaymentRequiredLike {
  x402Version?: number;
  resource?: { url?: string; description?: string } | undefined;
}

/** The reference clients' payment response context (x402 v2 `onPaymentResponse`). */
interface PaymentResponseContext {
  paymentPayload?: { payload?: unknown };
  settleResponse?: { success?: boolean; errorReason?: string } | undefined;
  paymentRequired?: { error?: string } | undefined;
}

/** The slice of @x402/core's x402Client that registerBotPay uses (2.x; v1 sellers need registerV1). */
export interface X402ClientLike {
  // biome-ignore lint/suspicious/noExplicitAny: the reference client's own parameter types differ between its versions.
  register(network: any, client: any): unknown;
  // biome-ignore lint/suspicious/noExplicitAny: as above.
  registerV1?(network: any, client: any): unknown;
  // biome-ignore lint/suspicious/noExplicitAny: as above.
  onBeforePaymentCreation(hook: (context: any) => Promise<unknown>): unknown;
  // biome-ignore lint/suspicious/noExplicitAny: as above.
  onPaymentResponse?(hook: (context: any) => Promise<unknown>): unknown;
  setSpendControls?(controls: false): unknown;
}

// Refusals wrapped by a reference client, by the message it carries: botPayErrorOf finds them.
const recentRefusals = new Map<string, BotPayError>();
const RECENT_MAX = 100;

function remember(error: BotPayError): void {
  recentRefusals.delete(error.message);
  recentRefusals.set(error.message, error);
  if (recentRefusals.size > RECENT_MAX) {
    const oldest = recentRefusals.keys().next().value;
    if (oldest !== undefined) recentRefusals.delete(oldest);
  }
}

/**
 * The service's typed error behind an error a reference x402 client threw: itself when it is a
 * BotPayError, one in its `cause` chain, or the refusal whose message it wraps
 * ("Failed to create payment payload: rail_guardrail_violation: …"). Undefined otherwise.
 */
export function botPayErrorOf(error: unknown): BotPayError | undefined {
  let e: unknown = error;
  for (let depth = 0; depth < 5 && e; depth++) {
    if (isBotPayError(e)) return e;
    e = (e as { cause?: unknown }).cause;
  }
  if (!(error instanceof Error)) return undefined;
  for (const [message, refusal] of recentRefusals) {
    if (error.message.endsWith(message)) return refusal;
  }
  return undefined;
}

/** The `exact` scheme client whose wallet is the service. Register it with registerBotPay. */
export class BotPaySchemeClient {
  readonly scheme = 'exact';
  private readonly resources = new WeakMap<object, PaymentRequiredLike>();
  private readonly paymentsByNonce = new Map<string, string>();

  constructor(
    private readonly payer: X402SchemePayer,
    private readonly options: BotPaySchemeOptions = {},
  ) {}

  /** Records the 402 answer a requirement came from (its resource URL), for createPaymentPayload. */
  learn(requirements: object, paymentRequired: PaymentRequiredLike): void {
    this.resources.set(requirements, paymentRequired);
  }

  /** SchemeNetworkClient: asks the service to pay; returns the signed payload the x402 client sends. */
  async createPaymentPayload(
    x402Version: number,
    requirements: X402PaymentRequirements,
  ): Promise<{ x402Version: number; payload: Record<string, unknown>; scheme?: string; network?: string }> {
    const required = this.resources.get(requirements);
    // x402 v1 requirements carry their resource; v2 names it once, beside `accepts`.
    const resourceUrl = x402Version === 1 ? requirements.resource : required?.resource?.url;
    if (typeof resourceUrl !== 'string' || resourceUrl.length === 0) {
      throw this.refused(
        new BotPayError({
          status: 0,
          code: 'validation_error',
          message:
            'The 402 answer names no resource URL: register the scheme with registerBotPay(client, bot), which reads it from the answer.',
        }),
      );
    }
    const description =
      (x402Version === 1 && typeof requirements.description === 'string'
        ? requirements.description
        : undefined) ?? required?.resource?.description;
    try {
      const first = await this.payer.payX402({
        resource_url: resourceUrl,
        payment_requirements: requirements,
        ...(description ? { description: description.slice(0, 500) } : {}),
      });
      this.options.onPayment?.(first);
      let paymentId = first.payment_id;
      let signedPayload: Record<string, unknown> | undefined;
      if (first.approved) signedPayload = first.payment_payload;
      else {
        if (this.options.waitForApproval === false) {
          throw new BotPayError({
            status: 202,
            code: 'payment_held',
            message: `The payment ${first.payment_id} is held for the owner's approval until ${first.expires_at}.`,
          });
        }
        const decided = await this.payer.waitForX402Payment(
          first.payment_id,
          this.options.maxWaitMs === undefined ? {} : { maxWaitMs: this.options.maxWaitMs },
        );
        this.options.onPayment?.(decided);
        if (decided.status !== 'approved' || !decided.payment_payload) {
          throw new BotPayError({
            status: 403,
            code: decided.status === 'denied' ? 'payment_denied' : 'payment_expired',
            message: decided.message,
          });
        }
        paymentId = decided.payment_id;
        signedPayload = decided.payment_payload;
      }
      const signed = signedPayload ?? {};
      const inner = (signed.payload ?? {}) as { authorization?: { nonce?: string } };
      const nonce = inner.authorization?.nonce;
      if (nonce) {
        this.paymentsByNonce.set(nonce, paymentId);
        if (this.paymentsByNonce.size > RECENT_MAX) {
          const oldest = this.paymentsByNonce.keys().next().value;
          if (oldest !== undefined) this.paymentsByNonce.delete(oldest);
        }
      }
      if (x402Version === 1) {
        return {
          x402Version: 1,
          scheme: String(signed.scheme ?? 'exact'),
          network: String(signed.network ?? requirements.network),
          payload: inner as Record<string, unknown>,
        };
      }
      return { x402Version: 2, payload: inner as Record<string, unknown> };
    } catch (error) {
      if (isBotPayError(error)) throw this.refused(error);
      throw error;
    }
  }

  /** onPaymentResponse: a seller that refused the payment is reported to the service, which checks it. */
  async paymentResponse(context: PaymentResponseContext): Promise<void> {
    const refusedBySettle = context.settleResponse?.success === false;
    if (!refusedBySettle && !context.paymentRequired) return;
    const nonce = (context.paymentPayload?.payload as { authorization?: { nonce?: string } } | undefined)
      ?.authorization?.nonce;
    const paymentId = nonce ? this.paymentsByNonce.get(nonce) : undefined;
    if (!paymentId || !this.payer.reportX402Refusal) return;
    const reason = context.settleResponse?.errorReason ?? context.paymentRequired?.error;
    try {
      await this.payer.reportX402Refusal(paymentId, reason ? { reason: reason.slice(0, 200) } : {});
    } catch {
      // The report only speeds up the release; the chain decides in the end.
    }
  }

  /** The error thrown to the x402 client: the service's, with its code at the front of the message. */
  private refused(error: BotPayError): BotPayError {
    const typed = new BotPayError({
      status: error.status,
      code: error.code,
      message: `${error.code}: ${error.message}`,
      retryAfterSeconds: error.retryAfterSeconds,
      details: error.details,
      requestId: error.requestId,
      cause: error,
    });
    remember(typed);
    return typed;
  }
}

/**
 * Registers the service as the wallet of a reference x402 client: the BotPay scheme for every EVM
 * network of x402 v2 (`eip155:*`) and, where the client has registerV1, the v1 network names; a hook
 * that reads each 402's resource URL; and, where the client has onPaymentResponse, the report of a
 * seller's refusal. The client's own spend controls are turned off (the owner's guardrails on the
 * service decide; `keepSpendControls` keeps them). Returns the client.
 */
export function registerBotPay<C extends X402ClientLike>(
  client: C,
  payer: X402SchemePayer,
  options: BotPaySchemeOptions = {},
): C {
  const scheme = new BotPaySchemeClient(payer, options);
  if (!options.keepSpendControls && typeof client.setSpendControls === 'function')
    client.setSpendControls(false);
  client.register('eip155:*', scheme);
  if (typeof client.registerV1 === 'function') {
    for (const network of X402_V1_EVM_NETWORKS) client.registerV1(network, scheme);
  }
  client.onBeforePaymentCreation(
    async (context: { paymentRequired?: PaymentRequiredLike; selectedRequirements?: object }) => {
      if (context.selectedRequirements && context.paymentRequired) {
        scheme.learn(context.selectedRequirements, context.paymentRequired);
      }
      return undefined;
    },
  );
  if (typeof client.onPaymentResponse === 'function') {
    client.onPaymentResponse(async (context: PaymentResponseContext) => {
      await scheme.paymentResponse(context);
      return undefined;
    });
  }
  return client;
}
