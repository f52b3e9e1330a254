import { BotPayError, isBotPayError } from './errors.ts';
import type { CheckoutStatusResponse } from './types.ts';

export interface WaitForDecisionOptions {
  /** Cancels the wait; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Overrides the client's sleep (tests). */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Overrides the client's clock (tests). */
  now?: () => number;
  /** Called after every successful poll, e.g. for logging. */
  onPoll?: (status: CheckoutStatusResponse) => void;
  /**
   * Gives up (rejecting with a BotPayError `timeout`) after this many ms. Default: none; the
   * service itself expires a pending purchase after its approval window (15 minutes).
   */
  maxWaitMs?: number;
}

/** The slice of the client the poller needs (keeps this file testable on its own). */
export interface StatusPoller {
  checkoutStatus(confirmationId: string, options?: { signal?: AbortSignal }): Promise<CheckoutStatusResponse>;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  now(): number;
}

/** The polling schedule of docs/api.md: every 5 seconds for the first minute, then every 15 seconds. */
export const FAST_POLL_MS = 5_000;
export const SLOW_POLL_MS = 15_000;
export const FAST_PHASE_MS = 60_000;

const FINAL = new Set(['approved', 'denied', 'expired']);

export async function waitForDecision(
  client: StatusPoller,
  confirmationId: string,
  options: WaitForDecisionOptions = {},
): Promise<CheckoutStatusResponse> {
  const sleep = options.sleep ?? ((ms: number, signal?: AbortSignal) => client.sleep(ms, signal));
  const now = options.now ?? (() => client.now());
  const { signal } = options;
  const started = now();
  for (;;) {
    if (signal?.aborted) throw signal.reason;
    try {
      const status = await client.checkoutStatus(confirmationId, signal ? { signal } : {});
      options.onPoll?.(status);
      if (FINAL.has(status.status)) return status;
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      // A blip (network, 429, 5xx) that outlasted the request's own retries must not end a wait
      // that may last 15 minutes: poll again at the next tick. Anything else (401, 404) is final.
      if (!isBotPayError(error) || !error.transient) throw error;
    }
    const elapsed = now() - started;
    if (options.maxWaitMs !== undefined && elapsed >= options.maxWaitMs) {
      throw new BotPayError({
        status: 0,
        code: 'timeout',
        message: `No decision on ${confirmationId} within ${options.maxWaitMs} ms.`,
      });
    }
    const interval = elapsed < FAST_PHASE_MS ? FAST_POLL_MS : SLOW_POLL_MS;
    // The last poll falls on the deadline rather than up to one interval after it.
    const left = options.maxWaitMs === undefined ? interval : options.maxWaitMs - elapsed;
    await sleep(Math.min(interval, left), signal);
  }
}
