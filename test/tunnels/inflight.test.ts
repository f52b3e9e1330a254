import { describe, expect, it } from 'vitest';
import { InFlight } from '../../src/tunnels/inflight.ts';

interface Item {
  id: number;
  tag: string;
}

describe('InFlight (requests in flight by id, without a Map per request)', () => {
  it('finds, replaces and removes by id; ids sharing a slot (4 × capacity apart) stay apart', () => {
    const table = new InFlight<Item>(16); // 64 slots
    const a = { id: 5, tag: 'a' };
    const b = { id: 5 + 64, tag: 'b' }; // the same slot as a, while a is in flight
    const c = { id: 5 + 128, tag: 'c' };
    table.set(a);
    table.set(b);
    table.set(c);
    expect(table.size).toBe(3);
    expect(table.get(5)).toBe(a);
    expect(table.get(69)).toBe(b);
    expect(table.get(133)).toBe(c);
    expect(table.has(197)).toBe(false);
    expect(
      table
        .values()
        .map((i) => i.tag)
        .sort(),
    ).toEqual(['a', 'b', 'c']);
    // Replacing keeps one entry per id, in the slot or beside it.
    table.set({ id: 69, tag: 'b2' });
    table.set({ id: 5, tag: 'a2' });
    expect(table.size).toBe(3);
    expect(table.get(69)?.tag).toBe('b2');
    expect(table.get(5)?.tag).toBe('a2');
    // The slot's own id leaves; the others are still found, and one set again is not doubled.
    expect(table.delete(5)).toBe(true);
    expect(table.delete(5)).toBe(false);
    expect(table.get(5)).toBeUndefined();
    expect(table.get(69)?.tag).toBe('b2');
    table.set({ id: 69, tag: 'b3' });
    expect(table.size).toBe(2);
    expect(table.values().filter((i) => i.id === 69)).toHaveLength(1);
    expect(table.delete(69)).toBe(true);
    expect(table.delete(133)).toBe(true);
    expect(table.size).toBe(0);
    expect(table.values()).toEqual([]);
  });

  it('keeps many sequential ids with a few long-lived ones, like a busy tunnel, and clears', () => {
    const table = new InFlight<Item>(256);
    const live = new Map<number, Item>();
    for (let id = 1; id <= 20_000; id++) {
      const item = { id, tag: String(id) };
      table.set(item);
      live.set(id, item);
      // Most answers come back soon; every 1000th stays in flight for good.
      const done = id - 20;
      if (done > 0 && done % 1000 !== 0 && live.delete(done)) expect(table.delete(done)).toBe(true);
    }
    expect(table.size).toBe(live.size);
    for (const [id, item] of live) expect(table.get(id)).toBe(item);
    expect(new Set(table.values())).toEqual(new Set(live.values()));
    // Snapshot: deleting while going through it is safe.
    for (const item of table.values()) table.delete(item.id);
    expect(table.size).toBe(0);
    table.set({ id: 7, tag: 'x' });
    table.clear();
    expect(table.size).toBe(0);
    expect(table.get(7)).toBeUndefined();
  });
});
