// Money is integer cents end to end; USD numbers appear only in serialised responses.

export function centsToUsd(cents: number): number {
  return Math.round(cents) / 100;
}

export function isCents(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value);
}
