import { describe, expect, it } from 'vitest';
import { newId, newTimeOrderedId, randomBase32, sortableTime, TIME_CHARS } from '../../src/platform/ids.ts';

// Ids carry 80 random bits (16 base32 characters) drawn from a pool of CSPRNG bytes handed out
// once each (src/platform/ids.ts): every id must be new, across pool refills, and every character
// of the alphabet equally likely.

describe('ids', () => {
  it('never repeats across many pool refills, and hands out each random byte once', () => {
    const seen = new Set<string>();
    // 20,000 ids of 16 bytes: 320,000 bytes, about 78 refills of the 4 KiB pool, with lengths that
    // do not divide it (a request larger than what is left takes a fresh pool).
    for (let i = 0; i < 20_000; i++) seen.add(i % 3 === 0 ? randomBase32(23) : newId('chk'));
    expect(seen.size).toBe(20_000);
  });

  it('draws every base32 character about equally often', () => {
    const counts = new Map<string, number>();
    const n = 32 * 2_000;
    for (const c of randomBase32(n)) counts.set(c, (counts.get(c) ?? 0) + 1);
    expect(counts.size).toBe(32);
    // Binomial(64,000, 1/32): mean 2,000, standard deviation 44; 32 comparisons, each within 7
    // standard deviations (a chance failure is below 1e-10).
    for (const count of counts.values()) expect(Math.abs(count - 2_000)).toBeLessThan(7 * 44);
    // Longer than the pool: still one draw, all of it random.
    expect(randomBase32(5_000)).toMatch(/^[a-z2-7]{5000}$/);
  });

  it('time-ordered ids sort by their time, then carry the same random part as any id', () => {
    const a = newTimeOrderedId('evt', Date.UTC(2026, 0, 1));
    const b = newTimeOrderedId('evt', Date.UTC(2026, 0, 1) + 1);
    expect(a < b).toBe(true);
    expect(a.slice(4, 4 + TIME_CHARS)).toBe(sortableTime(Date.UTC(2026, 0, 1)));
    expect(a).toMatch(/^evt_[2-7a-z]{26}$/);
  });
});
