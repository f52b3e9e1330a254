/**
 * A pure, costly function of a string remembered by its argument, in a map that starts over when
 * it holds `max` entries (no eviction bookkeeping on the hot path; the working set — a deployment's
 * bots, their secrets and URLs — is far below the bound). A call that throws remembers nothing.
 */
export function memoize<V>(max: number, compute: (key: string) => V): (key: string) => V {
  const known = new Map<string, V>();
  return (key) => {
    let value = known.get(key);
    if (value === undefined) {
      value = compute(key);
      if (known.size >= max) known.clear();
      known.set(key, value);
    }
    return value;
  };
}
