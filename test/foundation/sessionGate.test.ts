import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { runAsRequest, SessionGate, WAIT_BUCKETS } from '../../src/platform/db/gate.ts';

// The database sessions' gate (src/platform/db/gate.ts), on a fake clock: first come, first
// served; a waiter gets the session a release hands on, or is refused `overloaded` once its wait
// reaches the bound, and a refused waiter never takes a session later; unbounded waiters wait.

describe('the database sessions gate', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const gate = (size: number, maxWaitMs: number) => new SessionGate(size, maxWaitMs, () => Date.now());

  it('hands sessions out in order of arrival and counts the waits', async () => {
    const g = gate(2, 1_000);
    expect(g.tryAcquire()).toBe(true);
    await g.acquire();
    const order: string[] = [];
    const a = g.acquire().then(() => order.push('a'));
    const b = g.acquire().then(() => order.push('b'));
    // Nobody jumps the line while others wait, even at a release's moment.
    expect(g.tryAcquire()).toBe(false);
    expect(g.load()).toMatchObject({ size: 2, inUse: 2, waiting: 2, oldestWaitMs: 0 });
    await vi.advanceTimersByTimeAsync(30);
    expect(g.load().oldestWaitMs).toBe(30);
    g.release();
    await a;
    expect(order).toEqual(['a']);
    g.release();
    await b;
    expect(order).toEqual(['a', 'b']);
    expect(g.load()).toMatchObject({ inUse: 2, waiting: 0, oldestWaitMs: 0, refused: 0 });
    g.release();
    g.release();
    expect(g.load().inUse).toBe(0);
    const { waitCounts, waitSumSeconds } = g.load();
    // Two at once (0 ms), a after 30 ms and b after 30 ms.
    expect(waitCounts[0]).toBe(2);
    expect(waitCounts[WAIT_BUCKETS.indexOf(0.05)]).toBe(2);
    expect(waitSumSeconds).toBeCloseTo(0.06, 5);
  });

  it('refuses a waiter overloaded when its wait reaches the bound; it never takes a session afterwards', async () => {
    const g = gate(1, 100);
    await g.acquire();
    const refused = g.acquire().catch((e: unknown) => e);
    const next = g.acquire().catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(99);
    expect(g.load().waiting).toBe(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(await refused).toMatchObject({
      code: 'overloaded',
      status: 503,
      details: { retry_after_seconds: 1 },
    });
    expect(await next).toMatchObject({ code: 'overloaded' });
    expect(g.load()).toMatchObject({ inUse: 1, waiting: 0, refused: 2 });
    // The session is free again after its release, not handed to the refused ones.
    g.release();
    expect(g.load().inUse).toBe(0);
    expect(g.tryAcquire()).toBe(true);
  });

  it('a refused waiter in the middle of the line is passed over', async () => {
    const g = gate(1, 100);
    await g.acquire();
    const first = g.acquire();
    await vi.advanceTimersByTimeAsync(60);
    const second = g.acquire().catch((e: unknown) => e);
    g.release(); // first gets it at 60 ms
    await first;
    await vi.advanceTimersByTimeAsync(100); // second's bound passes while first holds it
    expect(await second).toMatchObject({ code: 'overloaded' });
    const third = g.acquire();
    g.release();
    await third; // handed on to the third, past the refused second
    expect(g.load()).toMatchObject({ inUse: 1, waiting: 0, refused: 1 });
  });

  it('an unbounded waiter waits however long it takes', async () => {
    const g = gate(1, 100);
    await g.acquire();
    let got = false;
    const waiting = g.acquire(true).then(() => {
      got = true;
    });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(got).toBe(false);
    g.release();
    await waiting;
    expect(got).toBe(true);
    expect(g.load().refused).toBe(0);
  });
});

describe('a request is admitted by its first session, not refused half-way', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('its later statements wait their turn past the bound; its first, or one beside its own session, keep the bound', async () => {
    const g = new SessionGate(1, 100, () => Date.now());
    let taken!: () => void;
    const gateTaken = new Promise<void>((resolve) => {
      taken = resolve;
    });
    let second = false;
    let nested: unknown;
    const request = runAsRequest(async () => {
      await g.acquire(); // its admission: a statement that may commit
      g.release();
      await gateTaken; // meanwhile another statement takes the one session
      await g.acquire(); // waits past the bound instead of being refused `overloaded`
      second = true;
      nested = await g.acquire().catch((e: unknown) => e); // beside its own session: bounded
      g.release();
    });
    await vi.advanceTimersByTimeAsync(0);
    await g.acquire(); // outside any request (a job's statement), held for a long while
    taken();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(second).toBe(false);
    expect(g.load()).toMatchObject({ waiting: 1, refused: 0 });

    // A request arriving now is refused at its first statement, before it changed anything.
    const arriving = runAsRequest(() => g.acquire()).catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(100);
    expect(await arriving).toMatchObject({ code: 'overloaded' });

    g.release(); // the long statement ends: the waiting request goes on
    await vi.advanceTimersByTimeAsync(0);
    expect(second).toBe(true);
    await vi.advanceTimersByTimeAsync(100);
    await request;
    expect(nested).toMatchObject({ code: 'overloaded' });
    expect(g.load()).toMatchObject({ inUse: 0, waiting: 0, refused: 2 });
  });
});
