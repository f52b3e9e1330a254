// Narrowing without `!` (biome's noNonNullAssertion): a value the code's own logic guarantees (the
// row just written or locked, a regular expression's group that matched, an index within bounds)
// is checked, and its absence is a bug reported by name instead of a TypeError further on.

/** `value`, or an Error naming `what` when it is undefined or null. */
export function present<T>(value: T | null | undefined, what: string): T {
  if (value === undefined || value === null) throw new Error(`internal error: ${what} is missing`);
  return value;
}
