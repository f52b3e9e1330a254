// Webhook health of a bot. webhook_fail_count is the number of consecutive failed
// attempts (over all of the bot's deliveries, in the order they were recorded); any success sets
// it to 0 and the status to `active`.
//
//   pending      tunnel bots start here; stays pending while failing, until UNREACHABLE_AFTER
//   active       after any successful attempt
//   degraded     DEGRADED_AFTER consecutive failures after having worked (active → degraded)
//   unreachable  UNREACHABLE_AFTER consecutive failures (from any state)
//
// Six is the number of attempts one delivery gets (the first plus five retries), so a bot whose
// every attempt for a whole retry cycle failed is unreachable; three failures (about 6 minutes
// for a single event) are enough to call it degraded.

export const DEGRADED_AFTER = 3;
export const UNREACHABLE_AFTER = 6;

export type WebhookHealth = 'pending' | 'active' | 'degraded' | 'unreachable';

/** The outcome of a batch of attempts for one bot, in recording order. */
export interface HealthChange {
  botId: string;
  /** True when at least one attempt succeeded: the count restarts from the last success. */
  reset: boolean;
  /** Failures after the last success (or all failures when none succeeded). */
  failures: number;
}

export function summarise(outcomes: ReadonlyArray<{ botId: string; ok: boolean }>): HealthChange[] {
  const byBot = new Map<string, HealthChange>();
  for (const { botId, ok } of outcomes) {
    let change = byBot.get(botId);
    if (!change) {
      change = { botId, reset: false, failures: 0 };
      byBot.set(botId, change);
    }
    if (ok) {
      change.reset = true;
      change.failures = 0;
    } else {
      change.failures++;
    }
  }
  return [...byBot.values()];
}

/**
 * The rule the recording call applies in SQL (health_next / health_set in
 * src/migrations/functions/webhook_record_and_claim.sql, given DEGRADED_AFTER and UNREACHABLE_AFTER),
 * in TypeScript for documentation and unit tests.
 */
export function nextHealth(
  current: WebhookHealth,
  failCount: number,
  change: Pick<HealthChange, 'reset' | 'failures'>,
): { status: WebhookHealth; failCount: number } {
  const count = change.reset ? change.failures : failCount + change.failures;
  let status: WebhookHealth = current;
  if (count >= UNREACHABLE_AFTER) status = 'unreachable';
  else if (count >= DEGRADED_AFTER && (change.reset || current !== 'pending')) status = 'degraded';
  else if (change.reset) status = 'active';
  return { status, failCount: count };
}
