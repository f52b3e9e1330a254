import { describe, expect, it } from 'vitest';
import { memoize } from '../../src/platform/memo.ts';

describe('memoize', () => {
  it('computes each key once, starts over when full, and remembers nothing from a call that threw', () => {
    const calls: string[] = [];
    const length = memoize(2, (key) => {
      calls.push(key);
      if (key === 'bad') throw new Error('refused');
      return key.length;
    });
    expect([length('a'), length('bb'), length('a')]).toEqual([1, 2, 1]);
    expect(calls).toEqual(['a', 'bb']);
    length('ccc'); // full: the map starts over with 'ccc'
    length('a');
    expect(calls).toEqual(['a', 'bb', 'ccc', 'a']);
    expect(() => length('bad')).toThrow('refused');
    expect(() => length('bad')).toThrow('refused');
    expect(calls.filter((k) => k === 'bad')).toHaveLength(2);
  });
});
