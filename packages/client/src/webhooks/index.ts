export type { WebhookEvent } from '../types.ts';
export { createNodeWebhookHandler, readRawBody } from './node.ts';
export {
  createWebhookReceiver,
  DEFAULT_MAX_BODY_BYTES,
  type DedupeStore,
  MemoryDedupeStore,
  type ReceiverAnswer,
  type WebhookContext,
  type WebhookReceiver,
  type WebhookReceiverOptions,
} from './receiver.ts';
export {
  DEFAULT_TIMESTAMP_TOLERANCE_SECONDS,
  type StandardVerifyFailure,
  type StandardVerifyOptions,
  signPayload,
  signStandard,
  verifySignature,
  verifyStandardWebhook,
} from './verify.ts';
export {
  type StandardHeaders,
  signPayloadAsync,
  signStandardAsync,
  type VerifiedRequest,
  type VerifyRequestOptions,
  verifySignatureAsync,
  verifyStandardWebhookAsync,
  verifyWebhookRequest,
} from './web.ts';
