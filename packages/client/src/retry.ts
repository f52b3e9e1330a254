// Backoff for automatic retries: exponential with jitter, never shorter than what the service asked
// for (retry_after_seconds / Retry-After), and never longer than the caller is willing to wait.

export interface RetryOptions {
  /** Attempts in total, the first included. Default 4. 1 disables retries. */
  maxAttempts: number;
  /** First backoff step in ms; doubles per retry. Default 300. */
  baseDelayMs: number;
  /** Cap of one backoff step in ms (before honouring Retry-After). Default 20 000. */
  maxDelayMs: number;
  /**
   * The longest Retry-After the client waits out by itself. A longer one (registration's 3600 s)
   * is handed back as the BotPayError so the caller can schedule it. Default 60.
   */
  maxRetryAfterSeconds: number;
}

export const DEFAULT_RETRY: RetryOptions = {
  maxAttempts: 4,
  baseDelayMs: 300,
  maxDelayMs: 20_000,
  maxRetryAfterSeconds: 60,
};

/**
 * Delay before retry number `retry` (0 for the first retry). "Equal jitter": half the exponential
 * step fixed, half random, so many clients that failed together do not come back together, and no
 * retry is immediate. With `retryAfterSeconds` the wait is at least that, plus up to a second of
 * jitter so that rate-limited clients do not all return in the same instant.
 */
export function backoffDelay(
  retry: number,
  options: RetryOptions,
  random: () => number,
  retryAfterSeconds?: number,
): number {
  const step = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** retry);
  const jittered = step / 2 + random() * (step / 2);
  if (retryAfterSeconds === undefined) return Math.round(jittered);
  return Math.round(retryAfterSeconds * 1000 + random() * Math.min(1000, step));
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
