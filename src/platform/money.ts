// Money inside the service is integer micro-dollars (1 USD = 1,000,000 micros; one atomic unit of
// USDC is one micro), exact, in safe integers: the ledger, balances, limits and counters
// (migration 0050). At the edges: card purchases and the owner's limits arrive as whole cents
// (`amount_cents`, `…_cents`: centsToMicros), x402 prices as atomic USDC (micros already), and
// answers give USD numbers (`…_usd`: microsToUsd).

export const MICROS_PER_CENT = 10_000;
export const MICROS_PER_USD = 1_000_000;

/** Whole cents (an API input) → micros. */
export function centsToMicros(cents: number): number {
  return Math.round(cents) * MICROS_PER_CENT;
}

/** Micros → a USD number for an answer (exact to the micro: 1000 → 0.001, 1_250_000 → 1.25). */
export function microsToUsd(micros: number): number {
  return Math.round(micros) / MICROS_PER_USD;
}

/** Whole cents → a USD number (an API input repeated in an answer). */
export function centsToUsd(cents: number): number {
  return Math.round(cents) / 100;
}

/** Micros → whole cents, rounded down (for a figure the API gives in cents). */
export function microsToCentsFloor(micros: number): number {
  return Math.floor(micros / MICROS_PER_CENT);
}

/** True when micros is a whole number of cents. */
export function isWholeCents(micros: number): boolean {
  return micros % MICROS_PER_CENT === 0;
}

/** "$1.25", "$1250.00", "$0.001": whole cents as two decimals (as toFixed(2) did), smaller amounts to the micro. */
export function usdText(micros: number): string {
  const usd = microsToUsd(micros);
  const sign = usd < 0 ? '-' : '';
  return `${sign}$${Math.abs(usd).toLocaleString('en-US', {
    minimumFractionDigits: 2,
    maximumFractionDigits: 6,
    useGrouping: false,
  })}`;
}

/**
 * "25", "25.5", "$1,250.00", "0.001" → micros; undefined when it is not an amount, or has more
 * decimals than `decimals` (2: whole cents, 6: to the micro).
 */
export function parseUsdToMicros(input: unknown, decimals: 2 | 6 = 6): number | undefined {
  if (typeof input !== 'string') return undefined;
  const text = input
    .trim()
    .replace(/^\$\s*/, '')
    .replace(/,/g, '');
  const match = new RegExp(`^(\\d{1,10})(?:\\.(\\d{1,${decimals}}))?$`).exec(text);
  if (!match) return undefined;
  const micros = Number(match[1]) * MICROS_PER_USD + Number((match[2] ?? '').padEnd(6, '0'));
  return Number.isSafeInteger(micros) ? micros : undefined;
}

/** An optional whole-cents input (a PATCH field) → micros, or null when absent (SQL coalesce). */
export function optionalCentsToMicros(cents: number | undefined): number | null {
  return cents === undefined ? null : centsToMicros(cents);
}
