export {
  BotPayClient,
  type BotPayClientOptions,
  type CallOptions,
  type CheckoutOptions,
  CLIENT_OPERATIONS,
  CLIENT_VERSION,
} from './client.ts';
export { BOT_PAY_ERROR_CODES, BotPayError, type BotPayErrorCode, isBotPayError } from './errors.ts';
export type { BotOperations } from './generated.ts';
export { DEFAULT_RETRY, type RetryOptions } from './retry.ts';
export type * from './types.ts';
export {
  FAST_PHASE_MS,
  FAST_POLL_MS,
  SLOW_POLL_MS,
  type WaitForDecisionOptions,
} from './waitForDecision.ts';
// Webhook signatures with Web Crypto: the main entry imports nothing of Node, so it bundles for
// browsers and edge runtimes (test/bundle.test.ts). The synchronous node:crypto functions
// (signPayload, verifySignature, signStandard, verifyStandardWebhook) and the Node, Express and
// Fastify middleware are in '@botpay/client/webhooks'.
export {
  DEFAULT_TIMESTAMP_TOLERANCE_SECONDS,
  type StandardHeaders,
  type StandardVerifyFailure,
  type StandardVerifyOptions,
  signPayloadAsync,
  signStandardAsync,
  type VerifiedRequest,
  type VerifyRequestOptions,
  verifySignatureAsync,
  verifyStandardWebhookAsync,
  verifyWebhookRequest,
} from './webhooks/web.ts';
export {
  type FetchWithX402Options,
  fetchWithX402,
  readPaymentRequired,
  type X402PaymentRequired,
  type X402PaymentRequirements,
  type X402PaymentStatus,
  type X402PayRequest,
  type X402PayResult,
} from './x402.ts';
export {
  isX402FetchAnswer,
  type X402FetchAnswer,
  type X402FetchPending,
  type X402FetchRequest,
  type X402FetchResult,
  x402FetchResponse,
} from './x402Fetch.ts';
export {
  type BotPaySchemeOptions,
  BotPaySchemeClient,
  botPayErrorOf,
  registerBotPay,
  X402_V1_EVM_NETWORKS,
} from './x402Scheme.ts';
