/**
 * Requests in flight on one tunnel connection, by id (the relay's pending answers, the client's
 * local requests). A Map with thousands of insertions and deletions a second reallocates its table
 * over and over; a table that has lived through a young-generation collection sits in the old
 * generation after it is dropped, and until the next full collection everything it still points
 * to survives young collections too: under load the tunnel client promoted ~2.5 MB of per-request
 * objects at every young collection (every ~80 ms) that way, with a full collection every ~0.4 s.
 * Here ids index a fixed array (ids are sequential, so the requests in flight rarely share a slot);
 * the rare id whose slot is taken by a request still in flight goes to a small Map.
 */
export class InFlight<T extends { readonly id: number }> {
  private readonly slots: Array<T | undefined>;
  private readonly mask: number;
  private readonly overflow = new Map<number, T>();
  private count = 0;

  /** `capacity`: the most requests expected in flight at once (the table has 4× the slots). */
  constructor(capacity: number) {
    let size = 64;
    while (size < capacity * 4 && size < 1 << 16) size *= 2;
    this.mask = size - 1;
    this.slots = new Array<T | undefined>(size).fill(undefined);
  }

  get size(): number {
    return this.count;
  }

  get(id: number): T | undefined {
    const item = this.slots[id & this.mask];
    if (item !== undefined && item.id === id) return item;
    return this.overflow.size > 0 ? this.overflow.get(id) : undefined;
  }

  has(id: number): boolean {
    return this.get(id) !== undefined;
  }

  /** Adds the item under its id (replacing one with the same id). */
  set(item: T): void {
    const id = item.id;
    if (this.overflow.size > 0 && this.overflow.has(id)) {
      this.overflow.set(id, item);
      return;
    }
    const slot = id & this.mask;
    const there = this.slots[slot];
    if (there === undefined) {
      this.slots[slot] = item;
      this.count++;
    } else if (there.id === id) {
      this.slots[slot] = item;
    } else {
      this.overflow.set(id, item);
      this.count++;
    }
  }

  /** Removes the id; whether it was there. */
  delete(id: number): boolean {
    const slot = id & this.mask;
    const there = this.slots[slot];
    if (there !== undefined && there.id === id) {
      this.slots[slot] = undefined;
      this.count--;
      return true;
    }
    if (this.overflow.size > 0 && this.overflow.delete(id)) {
      this.count--;
      return true;
    }
    return false;
  }

  /** A snapshot of what is in flight (safe to delete from while going through it). */
  values(): T[] {
    const out: T[] = [];
    if (this.count === 0) return out;
    for (const item of this.slots) if (item !== undefined) out.push(item);
    for (const item of this.overflow.values()) out.push(item);
    return out;
  }

  clear(): void {
    if (this.count === 0) return;
    this.slots.fill(undefined);
    this.overflow.clear();
    this.count = 0;
  }
}
