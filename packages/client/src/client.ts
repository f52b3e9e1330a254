import { BotPayError, errorFromResponse } from './errors.ts';
import { abortableSleep, backoffDelay, DEFAULT_RETRY, type RetryOptions } from './retry.ts';
import type {
  AckMessagesResponse,
  BotStatusResponse,
  CheckoutRequest,
  CheckoutResult,
  CheckoutStatusResponse,
  MessagesResponse,
  NextTaskResponse,
  RegistrationRequest,
  RegistrationResponse,
  TopupListResponse,
  TopupRequest,
  TopupRequestResponse,
  WalletCheckResponse,
} from './types.ts';
import { type WaitForDecisionOptions, waitForDecision } from './waitForDecision.ts';
import {
  type FetchWithX402Options,
  fetchWithX402,
  type X402PayRequest,
  type X402PayResult,
  type X402PaymentStatus,
} from './x402.ts';
import type { X402FetchRequest, X402FetchResult, X402RefusalAnswer, X402RefusalReport } from './x402Fetch.ts';

export const CLIENT_VERSION = '0.1.0';

/** Every bot endpoint this client calls, as "METHOD /path" (a test checks it covers /openapi.json). */
export const CLIENT_OPERATIONS = [
  'POST /api/v1/bots/register',
  'GET /api/v1/bot/status',
  'GET /api/v1/bot/wallet/check',
  'POST /api/v1/bot/merchant/checkout',
  'GET /api/v1/bot/merchant/checkout/status',
  'POST /api/v1/bot/tasks/next',
  'GET /api/v1/bot/messages',
  'POST /api/v1/bot/messages/ack',
  'POST /api/v1/bot/wallet/topup-requests',
  'GET /api/v1/bot/wallet/topup-requests',
  'POST /api/v1/bot/x402/pay',
  'GET /api/v1/bot/x402/payments/{payment_id}',
  'POST /api/v1/bot/x402/fetch',
  'POST /api/v1/bot/x402/payments/{payment_id}/refusal',
] as const;

export interface BotPayClientOptions {
  /** The service's base URL, e.g. `https://pay.example.com` (no `/api/v1`). */
  baseUrl: string;
  /** The bot's API key (`svc_live_…`). Not needed for `register`. */
  apiKey?: string;
  /** Retry policy for automatic retries (see RetryOptions). */
  retry?: Partial<RetryOptions>;
  /** Per-attempt timeout in ms. Default 30 000. */
  timeoutMs?: number;
  /** The fetch to use. Default: the global fetch (Node ≥ 20). */
  fetch?: typeof fetch;
  /** Waits between retries and polls; tests inject a fake. Default: an abortable setTimeout. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Milliseconds since the epoch; tests inject a fake clock. Default Date.now. */
  now?: () => number;
  /** Randomness for backoff jitter, in [0, 1). Default Math.random. */
  random?: () => number;
  /** Makes Idempotency-Keys for checkouts. Default crypto.randomUUID. */
  idempotencyKey?: () => string;
  /** Sent as User-Agent. */
  userAgent?: string;
}

/**
 * How a request may be repeated when no usable answer arrived:
 * - `idempotent`: repeating it cannot do anything twice (reads, acks, checkouts carrying an
 *   Idempotency-Key), so network errors, timeouts, 429 and 502/503/504 are retried;
 * - `unsafe`: only 429 is retried, because the service refuses a rate-limited request before doing
 *   anything; after a network error we cannot know whether it took effect.
 */
type RetryClass = 'idempotent' | 'unsafe';

interface RequestSpec {
  method: 'GET' | 'POST';
  path: string;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
  auth: boolean;
  retry: RetryClass;
  signal?: AbortSignal | undefined;
  /** Per-attempt timeout of this call, when longer than the client's. */
  timeoutMs?: number;
}

export interface CallOptions {
  /** Cancels the call (and its retries). The promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface CheckoutOptions extends CallOptions {
  /**
   * The Idempotency-Key of this logical purchase. Default: a fresh UUID per `checkout` call, reused
   * by its automatic retries. Pass your own (for example derived from a task id and stored with
   * your order) to stay safe across restarts of your bot: the service replays the first answer for
   * 24 hours and moves money once.
   */
  idempotencyKey?: string;
}

export class BotPayClient {
  readonly baseUrl: string;
  private readonly options: BotPayClientOptions;
  private readonly retry: RetryOptions;
  private readonly fetchImpl: typeof fetch;
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  readonly now: () => number;
  private readonly random: () => number;

  constructor(options: BotPayClientOptions) {
    const url = new URL(options.baseUrl);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError('baseUrl must be an http(s) URL');
    }
    this.baseUrl = url.toString().replace(/\/+$/, '');
    this.options = options;
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    if (!Number.isInteger(this.retry.maxAttempts) || this.retry.maxAttempts < 1) {
      throw new TypeError('retry.maxAttempts must be an integer ≥ 1');
    }
    // Called through a wrapper: a browser's fetch called as a method of this client (this.fetchImpl())
    // throws "Illegal invocation" (test/browser/sdkBundle.test.ts).
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.sleep = options.sleep ?? abortableSleep;
    this.now = options.now ?? Date.now;
    this.random = options.random ?? Math.random;
  }

  /** A client with the same settings that authenticates with `apiKey` (e.g. right after `register`). */
  withApiKey(apiKey: string): BotPayClient {
    return new BotPayClient({ ...this.options, apiKey });
  }

  /**
   * Registers a new bot (POST /api/v1/bots/register, public). Save `api_key` and `webhook_secret`
   * at once: they are shown only here. Hand `owner_verification_url` (or `claim_token`) to the owner.
   * A network error is not retried (a second registration could not be told from the first); a
   * 429 carries `retryAfterSeconds` (3600 for registration).
   */
  async register(body: RegistrationRequest, options: CallOptions = {}): Promise<RegistrationResponse> {
    const res = await this.request<RegistrationResponse>({
      method: 'POST',
      path: '/api/v1/bots/register',
      body,
      auth: false,
      retry: 'unsafe',
      signal: options.signal,
    });
    return res.body;
  }

  /** The bot's status, rails and guardrails (GET /api/v1/bot/status). */
  async status(options: CallOptions = {}): Promise<BotStatusResponse> {
    return (await this.get<BotStatusResponse>('/api/v1/bot/status', undefined, options)).body;
  }

  /** Wallet balance and spending limits (GET /api/v1/bot/wallet/check). */
  async walletCheck(options: CallOptions = {}): Promise<WalletCheckResponse> {
    return (await this.get<WalletCheckResponse>('/api/v1/bot/wallet/check', undefined, options)).body;
  }

  /**
   * Asks the owner for funds (POST /api/v1/bot/wallet/topup-requests). Resolves with the request
   * (`status: 'pending'`); the owner's answer arrives as `wallet.topup_approved` (with
   * `wallet.funded`), `wallet.topup_declined` or `wallet.topup_expired`, or through `topupRequests`.
   * Repeating the same amount and reason while that request is open returns it, so a retry after a
   * lost answer never asks twice; a 429 (too many asks a day, or too many open) carries
   * `retryAfterSeconds`. Refusals: `wallet_not_active`, `wallet_frozen`, `validation_error`.
   */
  async requestTopup(request: TopupRequest, options: CallOptions = {}): Promise<TopupRequestResponse> {
    const res = await this.request<TopupRequestResponse>({
      method: 'POST',
      path: '/api/v1/bot/wallet/topup-requests',
      body: request,
      auth: true,
      retry: 'idempotent',
      signal: options.signal,
    });
    return res.body;
  }

  /**
   * The bot's top-up requests and their status, newest first (GET /api/v1/bot/wallet/topup-requests).
   * `limit` (1–200, default 50) and `before` (the `created_at` of the last one you have) page back.
   */
  async topupRequests(
    query: { limit?: number; before?: string } = {},
    options: CallOptions = {},
  ): Promise<TopupListResponse> {
    return (await this.get<TopupListResponse>('/api/v1/bot/wallet/topup-requests', query, options)).body;
  }

  /**
   * Requests a purchase (POST /api/v1/bot/merchant/checkout). Resolves with the approved result
   * (`approved: true`, card details) or the pending one (`approved: false`, then call
   * `waitForDecision(confirmation_id)`); rejects with a BotPayError for a refusal
   * (`insufficient_funds`, `wallet_frozen`, `allowance_exceeded`, … with `limitUsd`/`remainingUsd`).
   * Every attempt carries the same Idempotency-Key, so a retry after a lost answer never buys twice.
   */
  async checkout(request: CheckoutRequest, options: CheckoutOptions = {}): Promise<CheckoutResult> {
    const key = options.idempotencyKey ?? (this.options.idempotencyKey ?? defaultIdempotencyKey)();
    const res = await this.request<CheckoutResult>({
      method: 'POST',
      path: '/api/v1/bot/merchant/checkout',
      body: request,
      headers: { 'idempotency-key': key },
      auth: true,
      retry: 'idempotent',
      signal: options.signal,
    });
    return res.body;
  }

  /** One poll of a pending purchase (GET /api/v1/bot/merchant/checkout/status). */
  async checkoutStatus(confirmationId: string, options: CallOptions = {}): Promise<CheckoutStatusResponse> {
    const res = await this.get<CheckoutStatusResponse>(
      '/api/v1/bot/merchant/checkout/status',
      { confirmation_id: confirmationId },
      options,
    );
    return res.body;
  }

  /**
   * Polls a pending purchase until the owner approves or denies it or it expires (docs/api.md: every
   * 5 s for the first minute, then every 15 s). Resolves with the final status body (card details
   * when approved). Transient failures between polls are ridden out; cancel with `signal`.
   */
  waitForDecision(
    confirmationId: string,
    options: WaitForDecisionOptions = {},
  ): Promise<CheckoutStatusResponse> {
    return waitForDecision(this, confirmationId, options);
  }

  /** Checkout, then (when held for approval) wait for the owner's decision. */
  async checkoutAndWait(
    request: CheckoutRequest,
    options: CheckoutOptions & WaitForDecisionOptions = {},
  ): Promise<CheckoutResult | CheckoutStatusResponse> {
    const result = await this.checkout(request, options);
    if (result.approved) return result;
    return this.waitForDecision(result.confirmation_id, options);
  }

  /**
   * Fetches the next task (POST /api/v1/bot/tasks/next). Fulfil a purchase task with
   * `checkout({ ...task.instructions, task_id: task.task_id })`. Retried like a read: if an answer
   * is lost, repeating the call can only hand out the next task, which the lost answer did anyway.
   */
  async nextTask(options: CallOptions = {}): Promise<NextTaskResponse> {
    const res = await this.request<NextTaskResponse>({
      method: 'POST',
      path: '/api/v1/bot/tasks/next',
      auth: true,
      retry: 'idempotent',
      signal: options.signal,
    });
    return res.body;
  }

  /**
   * Asks the service to pay an HTTP 402 resource from the partner wallet (POST /api/v1/bot/x402/pay)
   * with the requirements the 402 response carried. Approved: `payment_header` is the value of the
   * PAYMENT-SIGNATURE header for the retried request; held: wait with `waitForX402Payment`.
   * Refusals reject with a BotPayError. Retries carry the same Idempotency-Key (one payment).
   */
  async payX402(request: X402PayRequest, options: CheckoutOptions = {}): Promise<X402PayResult> {
    const key = options.idempotencyKey ?? (this.options.idempotencyKey ?? defaultIdempotencyKey)();
    const res = await this.request<X402PayResult>({
      method: 'POST',
      path: '/api/v1/bot/x402/pay',
      body: request,
      headers: { 'idempotency-key': key },
      auth: true,
      retry: 'idempotent',
      signal: options.signal,
    });
    return res.body;
  }

  /** One poll of an x402 payment (GET /api/v1/bot/x402/payments/{payment_id}). */
  async x402Payment(paymentId: string, options: CallOptions = {}): Promise<X402PaymentStatus> {
    const path = `/api/v1/bot/x402/payments/${encodeURIComponent(paymentId)}`;
    return (await this.get<X402PaymentStatus>(path, undefined, options)).body;
  }

  /** Polls a held x402 payment until the owner decides or it expires (the checkout poll schedule). */
  waitForX402Payment(paymentId: string, options: WaitForDecisionOptions = {}): Promise<X402PaymentStatus> {
    const poller = {
      checkoutStatus: (id: string, o?: { signal?: AbortSignal }) => this.x402Payment(id, o),
      sleep: this.sleep,
      now: this.now,
    };
    return waitForDecision(
      poller as never,
      paymentId,
      options as never,
    ) as unknown as Promise<X402PaymentStatus>;
  }

  /**
   * Requests an x402 resource through the service (POST /api/v1/bot/x402/fetch): the service makes
   * the request, pays a 402 under the guardrails and answers the resource (`x402FetchResponse`
   * makes it a Response). Held for the owner: the 202 answer; call again with `payment_id` once
   * approved. Retries carry the same Idempotency-Key (one payment, the first answer replayed).
   */
  async fetchX402(request: X402FetchRequest, options: CheckoutOptions = {}): Promise<X402FetchResult> {
    const key = options.idempotencyKey ?? (this.options.idempotencyKey ?? defaultIdempotencyKey)();
    const res = await this.request<X402FetchResult>({
      method: 'POST',
      path: '/api/v1/bot/x402/fetch',
      body: request,
      headers: { 'idempotency-key': key },
      auth: true,
      retry: 'idempotent',
      signal: options.signal,
      // The service may wait for the resource twice (the 402, then the paid request).
      timeoutMs: Math.max(this.options.timeoutMs ?? 30_000, 75_000),
    });
    return res.body;
  }

  /** Tells the service the seller refused a signed payment (POST …/payments/{payment_id}/refusal). */
  async reportX402Refusal(
    paymentId: string,
    report: X402RefusalReport = {},
    options: CallOptions = {},
  ): Promise<X402RefusalAnswer> {
    const res = await this.request<X402RefusalAnswer>({
      method: 'POST',
      path: `/api/v1/bot/x402/payments/${encodeURIComponent(paymentId)}/refusal`,
      body: report,
      auth: true,
      retry: 'idempotent',
      signal: options.signal,
    });
    return res.body;
  }

  /** fetch(url) that pays a 402 answer through the service and retries once (see fetchWithX402). */
  fetchWithX402(url: string, init: RequestInit = {}, options: FetchWithX402Options = {}): Promise<Response> {
    return fetchWithX402(this, url, init, options);
  }

  /** Events not yet delivered by webhook or acknowledged (GET /api/v1/bot/messages). */
  async messages(
    query: Record<string, string | number | undefined> = {},
    options: CallOptions = {},
  ): Promise<MessagesResponse> {
    return (await this.get<MessagesResponse>('/api/v1/bot/messages', query, options)).body;
  }

  /** Acknowledges queued events so they are not listed again (POST /api/v1/bot/messages/ack). */
  async ackMessages(eventIds: readonly string[], options: CallOptions = {}): Promise<AckMessagesResponse> {
    const res = await this.request<AckMessagesResponse>({
      method: 'POST',
      path: '/api/v1/bot/messages/ack',
      body: { event_ids: eventIds },
      auth: true,
      retry: 'idempotent',
      signal: options.signal,
    });
    return res.body;
  }

  private get<T>(path: string, query: RequestSpec['query'], options: CallOptions) {
    return this.request<T>({
      method: 'GET',
      path,
      query,
      auth: true,
      retry: 'idempotent',
      signal: options.signal,
    });
  }

  /** One logical call: attempts, classification of failures, backoff between attempts. */
  private async request<T>(spec: RequestSpec): Promise<{ status: number; body: T }> {
    const url = new URL(this.baseUrl + spec.path);
    for (const [name, value] of Object.entries(spec.query ?? {})) {
      if (value !== undefined) url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = {
      accept: 'application/json',
      'user-agent': this.options.userAgent ?? `botpay-client/${CLIENT_VERSION}`,
      ...spec.headers,
    };
    if (spec.auth) {
      if (!this.options.apiKey) {
        throw new TypeError('This call needs an API key: new BotPayClient({ baseUrl, apiKey }).');
      }
      headers.authorization = `Bearer ${this.options.apiKey}`;
    }
    let payload: string | undefined;
    // No body, no Content-Type: the service rejects an empty body declared as JSON.
    if (spec.body !== undefined) {
      payload = JSON.stringify(spec.body);
      headers['content-type'] = 'application/json';
    }

    for (let attempt = 1; ; attempt++) {
      let error: BotPayError;
      try {
        const { res, text } = await this.attempt(
          url,
          spec.method,
          headers,
          payload,
          spec.signal,
          spec.timeoutMs,
        );
        if (res.ok) return { status: res.status, body: parseSuccess<T>(res, text) };
        error = errorFromResponse(res.status, res.headers, text);
      } catch (caught) {
        if (spec.signal?.aborted) throw spec.signal.reason;
        if (caught instanceof BotPayError) error = caught;
        else throw caught;
      }
      const wait = this.retryDelay(error, spec.retry, attempt);
      if (wait === undefined) throw error;
      await this.sleep(wait, spec.signal);
    }
  }

  private async attempt(
    url: URL,
    method: string,
    headers: Record<string, string>,
    body: string | undefined,
    signal: AbortSignal | undefined,
    timeoutMs?: number,
  ): Promise<{ res: Response; text: string }> {
    // One controller per attempt, tied to the caller's signal by a listener that is removed when the
    // attempt ends: a bot passes one long-lived signal to hundreds of polls, and nothing may pile
    // up on it (AbortSignal.any keeps a reference per composite on the source until GC).
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(
      () => {
        timedOut = true;
        controller.abort(new DOMException('The request timed out.', 'TimeoutError'));
      },
      timeoutMs ?? this.options.timeoutMs ?? 30_000,
    );
    const onAbort = () => controller.abort(signal?.reason);
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const res = await this.fetchImpl(url, {
        method,
        headers,
        body,
        signal: controller.signal,
        redirect: 'error',
      });
      // Read the body under the same timeout: a connection can also die half-way through it.
      return { res, text: await res.text() };
    } catch (cause) {
      if (signal?.aborted) throw signal.reason;
      if (timedOut) {
        throw new BotPayError({
          status: 0,
          code: 'timeout',
          message: `No answer from ${url.origin} in time.`,
          cause,
        });
      }
      throw new BotPayError({
        status: 0,
        code: 'network_error',
        message: `Could not reach ${url.origin}: ${describeCause(cause)}`,
        cause,
      });
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Milliseconds to wait before the next attempt, or undefined to give up with `error`. */
  private retryDelay(error: BotPayError, retryClass: RetryClass, attempt: number): number | undefined {
    if (attempt >= this.retry.maxAttempts) return undefined;
    const retryable =
      error.status === 429 ||
      (retryClass === 'idempotent' && (error.status === 0 || [502, 503, 504].includes(error.status)));
    if (!retryable) return undefined;
    if (error.retryAfterSeconds !== undefined && error.retryAfterSeconds > this.retry.maxRetryAfterSeconds) {
      return undefined;
    }
    return backoffDelay(attempt - 1, this.retry, this.random, error.retryAfterSeconds);
  }
}

function parseSuccess<T>(res: Response, text: string): T {
  try {
    return (text.length > 0 ? JSON.parse(text) : undefined) as T;
  } catch (cause) {
    throw new BotPayError({
      status: res.status,
      code: 'unexpected_response',
      message: `The service answered HTTP ${res.status} with a body that is not JSON.`,
      details: { body: text.slice(0, 500) },
      requestId: res.headers.get('x-request-id') ?? undefined,
      cause,
    });
  }
}

function defaultIdempotencyKey(): string {
  return globalThis.crypto.randomUUID();
}

function describeCause(cause: unknown): string {
  const inner = (cause as { cause?: { code?: string; message?: string } } | undefined)?.cause;
  if (inner?.code) return inner.code;
  if (inner?.message) return inner.message;
  return cause instanceof Error ? cause.message : String(cause);
}
