import { Cron } from 'croner';
import { ApiError } from '../platform/errors.ts';

// Cron expressions and time zones of schedules (schedules.ts, shadows.ts, engine.ts): parsed with
// croner, occurrences computed in the schedule's zone. A module of its own so that schedules.ts and
// shadows.ts, which use each other's functions, need not import each other.

const NICKNAMES = new Set(['@yearly', '@annually', '@monthly', '@weekly', '@daily', '@hourly']);

const invalid = (field: string, message: string) => new ApiError('validation_error', message, { field });

export function parseTimezone(tz: string): string {
  try {
    return new Intl.DateTimeFormat('en-US', { timeZone: tz }).resolvedOptions().timeZone;
  } catch {
    throw invalid('timezone', `timezone "${tz}" is not an IANA time zone (for example Europe/Berlin).`);
  }
}

/** A paused croner instance for the expression, or a 400 naming `cron`. */
export function parseCron(expression: string, timezone: string): Cron {
  const text = expression.trim().replace(/\s+/g, ' ');
  if (!NICKNAMES.has(text.toLowerCase()) && text.split(' ').length !== 5) {
    throw invalid(
      'cron',
      'cron must have 5 fields (minute hour day-of-month month day-of-week) or be a nickname such as @daily.',
    );
  }
  let cron: Cron;
  try {
    cron = new Cron(text, { timezone, paused: true });
  } catch (error) {
    throw invalid('cron', `cron is not valid: ${error instanceof Error ? error.message : 'unknown error'}`);
  }
  return cron;
}

/** The next occurrence strictly after `after`, or null when the expression never fires again. */
export function nextOccurrence(cron: Cron, after: number): number | null {
  return cron.nextRun(new Date(after))?.getTime() ?? null;
}

/**
 * The latest occurrence in [from, now], where `from` is itself an occurrence not yet produced.
 * After a long outage only this one is produced (no burst). Looks at the last two days first, so
 * a every-minute schedule after months of downtime costs a few thousand steps, not millions.
 */
export function latestOccurrence(cron: Cron, from: number, now: number): number {
  const MAX_STEPS = 10_000;
  let latest = from;
  const windowStart = now - 2 * 86_400_000;
  if (windowStart > from) {
    const first = nextOccurrence(cron, windowStart - 1);
    if (first !== null && first <= now) latest = first;
  }
  for (let i = 0; i < MAX_STEPS; i++) {
    const next = nextOccurrence(cron, latest);
    if (next === null || next > now) break;
    latest = next;
  }
  return latest;
}
