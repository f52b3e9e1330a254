import { MICROS_PER_CENT, parseUsdToMicros } from '../platform/money.ts';
import type { SafeHtml } from './html.ts';
import { flash } from './views/layout.ts';

// What every dashboard form handler shares: the OpenAPI tag, turning typed amounts into cents, and
// the fixed messages shown after a redirect (`?notice=<code>`: never reflected text, only a key into
// these tables). The forms' schemas are in schemas.ts.

export const tags = ['dashboard'];

/** "25", "25.5", "$1,250.00" → cents; undefined when it is not an amount with at most 2 decimals. */
export function parseUsdToCents(input: unknown): number | undefined {
  const micros = parseUsdToMicros(input, 2);
  return micros === undefined ? undefined : micros / MICROS_PER_CENT;
}

/**
 * Limits that cannot all be reached: a per-purchase limit above the per-day one, or a per-day
 * limit above the per-month one. Undefined when they are in order. Amounts in cents.
 */
export function limitOrderWarning(limits: {
  per?: number;
  day?: number;
  month?: number;
}): string | undefined {
  const problems: string[] = [];
  if (limits.per !== undefined && limits.day !== undefined && limits.per > limits.day)
    problems.push(`per purchase (${usdText(limits.per)}) is above per day (${usdText(limits.day)})`);
  if (limits.day !== undefined && limits.month !== undefined && limits.day > limits.month)
    problems.push(`per day (${usdText(limits.day)}) is above per month (${usdText(limits.month)})`);
  if (
    problems.length === 0 &&
    limits.per !== undefined &&
    limits.month !== undefined &&
    limits.per > limits.month
  )
    problems.push(`per purchase (${usdText(limits.per)}) is above per month (${usdText(limits.month)})`);
  if (problems.length === 0) return undefined;
  return `Saved, but check the limits: ${problems.join(' and ')}, so the larger limit can never be reached.`;
}

function usdText(cents: number): string {
  return `$${(cents / 100).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}

/** Fixed messages for `?notice=…` after a redirect, per page. */
export const NOTICES = {
  /** The bot page and the guardrails page. */
  account: {
    claimed: 'The bot is yours now. Its wallet is active; add funds to let it spend.',
    funded: 'Funds added.',
    frozen: 'Wallet frozen. The bot cannot spend until you unfreeze it.',
    unfrozen: 'Wallet unfrozen. The bot can spend again within its guardrails.',
    rail: 'Payment rail updated.',
    guardrails: 'Master guardrails saved.',
    unchanged: 'Nothing to save: every amount is as it was.',
  },
  /** The partner wallet section of the bot page. */
  x402: {
    x402_on: 'Partner wallet turned on. Send USDC to its address to fund it.',
    x402_off: 'Partner wallet turned off.',
    x402_saved: 'Partner wallet settings saved.',
    x402_refreshed: 'Balance read from the chain.',
  },
  cards: {
    started: 'Card started. Now type your card: it stays in this browser.',
    shared:
      'Card added with the same six profiles as the card you named. Give this bot the same profiles file.',
    activated: 'Card activated. Give the payment profiles file you saved to your bot.',
    settings: 'Card settings saved.',
    unchanged: 'Nothing to save: every setting is as it was.',
    status: 'Card status changed.',
    profiles: 'Profiles saved.',
  },
  schedules: {
    created: 'Schedule created. Your bot receives the purchase as a task when it is due.',
    pause: 'Schedule paused.',
    resume: 'Schedule resumed from its next time.',
    delete: 'Schedule deleted.',
  },
  approvals: {
    approved: 'Purchase approved. The bot receives the card details it needs.',
    denied: 'Purchase denied. The held amount is back in the wallet.',
    denied_all:
      "Every purchase the bot was waiting for is denied, and its wallet is frozen. Rotate its API key on the bot's page before you unfreeze it.",
    topup_approved: 'Top-up approved. The amount is in the bot’s wallet.',
    topup_declined: 'Top-up request declined. The bot is told.',
  },
  settings: {
    revoked: 'Token revoked. Programs that used it are refused from now on.',
  },
  webhooks: {
    retried: 'The delivery is queued to be sent again now. Reload in a moment to see the result.',
  },
} satisfies Record<string, Record<string, string>>;

/** The notice of `code` from the first table that has it, as a success message; '' for none. */
export function noticeFlash(
  code: string | undefined,
  ...tables: Array<Record<string, string>>
): SafeHtml | string {
  if (!code) return '';
  for (const table of tables) {
    const text = Object.hasOwn(table, code) ? table[code] : undefined;
    if (text !== undefined) return flash('ok', text);
  }
  return '';
}
