import { AsyncLocalStorage } from 'node:async_hooks';
import { describe, expect, it } from 'vitest';
import {
  isOverloadedError,
  OverloadedError,
  requestStanding,
  runAsRequest,
  SessionGate,
} from '../../src/platform/db/gate.ts';
import { type BatchItemAnswer, SpendBatcher } from '../../src/spend/batch.ts';

// The purchase queue of group commit (src/spend/batch.ts), without a database: its calls are
// functions the test resolves by hand, its clock a number the test moves.

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (v: T) => void;
  reject: (e: unknown) => void;
}
function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** A batcher over items named by strings, whose calls wait until the test answers them. */
function harness(
  options: { size?: number; concurrency?: number; maxWaitMs?: number; stallMs?: number } = {},
) {
  let now = 0;
  const alone: { item: string; done: Deferred<string> }[] = [];
  const batches: { items: string[]; done: Deferred<BatchItemAnswer<string>[]> }[] = [];
  const batcher = new SpendBatcher<string, string>(
    {
      size: options.size ?? 32,
      concurrency: options.concurrency ?? 1,
      maxWaitMs: options.maxWaitMs ?? 1000,
      // No call stalls unless a test says so.
      stallMs: options.stallMs ?? 1e9,
    },
    (item) => {
      const done = deferred<string>();
      alone.push({ item, done });
      return done.promise;
    },
    (items) => {
      const done = deferred<BatchItemAnswer<string>[]>();
      batches.push({ items, done });
      return done.promise;
    },
    () => now,
  );
  return {
    batcher,
    alone,
    batches,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

const settle = () => new Promise((r) => setImmediate(r));

/** Runs `fn` as a request whose work has begun (it had a session, and holds none now). */
function inBegunRequest<T>(fn: () => T): T {
  const gate = new SessionGate(1, 1000);
  return runAsRequest(() => {
    expect(gate.tryAcquire()).toBe(true);
    gate.release();
    return fn();
  });
}

describe('SpendBatcher: the purchase queue of group commit', () => {
  it('runs a purchase at once, alone, while a call is free and nobody waits', async () => {
    const h = harness({ concurrency: 2 });
    const a = h.batcher.run('bot1', 'a');
    const b = h.batcher.run('bot2', 'b');
    expect(h.alone.map((x) => x.item)).toEqual(['a', 'b']);
    h.alone[0]?.done.resolve('A');
    h.alone[1]?.done.resolve('B');
    expect([await a, await b]).toEqual(['A', 'B']);
    expect(h.batches).toHaveLength(0);
    expect(h.batcher.load()).toMatchObject({ waiting: 0, inFlight: 0, batches: 0 });
  });

  it('lets purchases that arrive while every call is busy share the next call, oldest first, one per bot', async () => {
    const h = harness({ concurrency: 1 });
    const first = h.batcher.run('bot1', 'a');
    const rest = [h.batcher.run('bot2', 'b'), h.batcher.run('bot2', 'c'), h.batcher.run('bot3', 'd')];
    expect(h.batcher.load()).toMatchObject({ waiting: 3, inFlight: 1 });
    expect(h.batches).toHaveLength(0);
    h.alone[0]?.done.resolve('A');
    expect(await first).toBe('A');
    await settle();
    // bot2's second purchase waits for the next call.
    expect(h.batches.map((b) => b.items)).toEqual([['b', 'd']]);
    h.batches[0]?.done.resolve([{ result: 'B' }, { result: 'D' }]);
    await settle();
    // One purchase waiting: its own statement, no batch.
    expect(h.alone.map((x) => x.item)).toEqual(['a', 'c']);
    h.alone[1]?.done.resolve('C');
    expect(await Promise.all(rest)).toEqual(['B', 'C', 'D']);
    expect(h.batcher.load()).toMatchObject({ waiting: 0, inFlight: 0, batches: 1, batched: 2 });
  });

  it('a bot flooding the queue gets one place per batch: the other bots’ purchases are not held up', async () => {
    const h = harness({ concurrency: 1, size: 4 });
    const blocker = h.batcher.run('x', 'x');
    const flood = Array.from({ length: 50 }, (_, i) => h.batcher.run('hostile', `f${i}`));
    const others = ['a', 'b', 'c'].map((n) => h.batcher.run(n, n));
    h.alone[0]?.done.resolve('X');
    await blocker;
    await settle();
    // The next call: the flood's oldest and every other bot's, whatever their places in the queue.
    expect(h.batches[0]?.items).toEqual(['f0', 'a', 'b', 'c']);
    h.batches[0]?.done.resolve(['F0', 'A', 'B', 'C'].map((result) => ({ result })));
    expect(await Promise.all(others)).toEqual(['A', 'B', 'C']);
    // The flood goes on, one of its purchases at a time.
    expect(h.alone.map((w) => w.item)).toEqual(['x', 'f1']);
    expect(h.batcher.load().waiting).toBe(48);
    expect(flood).toHaveLength(50);
  });

  it('keeps to the batch size and to the calls in flight', async () => {
    const h = harness({ size: 2, concurrency: 2 });
    const blockers = [h.batcher.run('x', 'x1'), h.batcher.run('y', 'y1')];
    const waiting = ['a', 'b', 'c', 'd', 'e'].map((n) => h.batcher.run(n, n));
    h.alone[0]?.done.resolve('X');
    await settle();
    expect(h.batches.map((b) => b.items)).toEqual([['a', 'b']]);
    h.alone[1]?.done.resolve('Y');
    await settle();
    expect(h.batches.map((b) => b.items)).toEqual([
      ['a', 'b'],
      ['c', 'd'],
    ]);
    expect(h.batcher.load().inFlight).toBe(2);
    h.batches[0]?.done.resolve([{ result: 'A' }, { result: 'B' }]);
    await settle();
    expect(h.alone.map((x) => x.item)).toEqual(['x1', 'y1', 'e']);
    h.batches[1]?.done.resolve([{ result: 'C' }, { result: 'D' }]);
    h.alone[2]?.done.resolve('E');
    expect(await Promise.all([...blockers, ...waiting])).toEqual(['X', 'Y', 'A', 'B', 'C', 'D', 'E']);
  });

  it('puts a purchase answered `later` ahead of newer arrivals, and runs one answered `alone` on its own', async () => {
    const h = harness({ concurrency: 1 });
    const blocker = h.batcher.run('x', 'x');
    const a = h.batcher.run('bot1', 'a');
    const b = h.batcher.run('bot2', 'b');
    const c = h.batcher.run('bot3', 'c');
    h.alone[0]?.done.resolve('X');
    await settle();
    expect(h.batches[0]?.items).toEqual(['a', 'b', 'c']);
    const d = h.batcher.run('bot4', 'd');
    h.batches[0]?.done.resolve(['later', 'alone', { result: 'C' }]);
    await settle();
    // b runs again on its own (outside the calls counted), a goes before d.
    expect(h.alone.map((x) => x.item)).toEqual(['x', 'b']);
    expect(h.batches[1]?.items).toEqual(['a', 'd']);
    h.alone[1]?.done.resolve('B');
    h.batches[1]?.done.resolve([{ result: 'A' }, { result: 'D' }]);
    expect(await Promise.all([blocker, a, b, c, d])).toEqual(['X', 'A', 'B', 'C', 'D']);
  });

  it('gives the purchases behind a stalled call a call of their own', async () => {
    const h = harness({ concurrency: 1, stallMs: 100 });
    const blocker = h.batcher.run('x', 'x');
    const a = h.batcher.run('bot1', 'a');
    expect(h.alone.map((w) => w.item)).toEqual(['x']);
    h.advance(99);
    const b = h.batcher.run('bot2', 'b');
    expect(h.alone.map((w) => w.item)).toEqual(['x']);
    expect(h.batches).toHaveLength(0);
    // The first call has run for 100 ms (a lock wait): it no longer counts against the one call.
    h.advance(1);
    const c = h.batcher.run('bot3', 'c');
    expect(h.batches.map((w) => w.items)).toEqual([['a', 'b', 'c']]);
    expect(h.batcher.load().inFlight).toBe(2);
    h.batches[0]?.done.resolve([{ result: 'A' }, { result: 'B' }, { result: 'C' }]);
    h.alone[0]?.done.resolve('X');
    expect(await Promise.all([blocker, a, b, c])).toEqual(['X', 'A', 'B', 'C']);
  });

  it('looks again when a call stalls, without a new arrival (real time)', async () => {
    let release!: (v: string) => void;
    const batcher = new SpendBatcher<string, string>(
      { size: 32, concurrency: 1, maxWaitMs: 10_000, stallMs: 30 },
      (item) =>
        item === 'x'
          ? new Promise<string>((r) => {
              release = r;
            })
          : Promise.resolve(item.toUpperCase()),
      async (items) => items.map((i) => ({ result: i.toUpperCase() })),
    );
    const x = batcher.run('x', 'x');
    const a = batcher.run('bot1', 'a');
    expect(await a).toBe('A');
    release('X');
    expect(await x).toBe('X');
  });

  it('is idle once nothing waits and no call runs (shutdown waits for it, at most its timeout)', async () => {
    const h = harness({ concurrency: 1 });
    expect(await Promise.race([h.batcher.idle(10_000).then(() => 'idle'), settle().then(() => 'busy')])).toBe(
      'idle',
    );
    const x = h.batcher.run('x', 'x');
    const a = h.batcher.run('bot1', 'a');
    let idle = false;
    const waited = h.batcher.idle(10_000).then(() => {
      idle = true;
    });
    h.alone[0]?.done.resolve('X');
    await x;
    await settle();
    // The call ended, but the purchase behind it runs now.
    expect(idle).toBe(false);
    h.alone[1]?.done.resolve('A');
    await a;
    await waited;
    expect(idle).toBe(true);
    // Bounded: a call that never ends does not hold a shutdown for ever.
    h.batcher.run('y', 'y');
    await h.batcher.idle(20);
    expect(h.batcher.load().inFlight).toBe(1);
  });

  it('a batch that failed is its purchases’ failure: none is run again (its commit may have happened)', async () => {
    const h = harness({ concurrency: 1 });
    const blocker = h.batcher.run('x', 'x');
    const a = h.batcher.run('bot1', 'a');
    // Whether or not the request had begun.
    const b = inBegunRequest(() => h.batcher.run('bot2', 'b'));
    h.alone[0]?.done.resolve('X');
    await blocker;
    await settle();
    const lost = new Error('Connection terminated unexpectedly');
    h.batches[0]?.done.reject(lost);
    await expect(a).rejects.toBe(lost);
    await expect(b).rejects.toBe(lost);
    expect(h.alone).toHaveLength(1);
    expect(h.batcher.load()).toMatchObject({ waiting: 0, inFlight: 0 });
  });

  it('a batch that got no session refuses the purchases whose requests had not begun, and runs the others alone', async () => {
    const h = harness({ concurrency: 1 });
    const blocker = h.batcher.run('x', 'x');
    const fresh = runAsRequest(() => h.batcher.run('bot1', 'a'));
    // A request that has had a session already (its work has begun): never refused half-way.
    const begun = inBegunRequest(() => h.batcher.run('bot2', 'b'));
    h.alone[0]?.done.resolve('X');
    await blocker;
    await settle();
    h.batches[0]?.done.reject(new OverloadedError('no session'));
    const refused = await fresh.catch((e: unknown) => e);
    expect(isOverloadedError(refused)).toBe(true);
    await settle();
    expect(h.alone.map((x) => x.item)).toEqual(['x', 'b']);
    h.alone[1]?.done.resolve('B');
    expect(await begun).toBe('B');
  });

  it('refuses `overloaded`, unrun, a purchase that waited past the bound before its request began', async () => {
    const h = harness({ concurrency: 1, maxWaitMs: 2000 });
    const blocker = h.batcher.run('x', 'x');
    const late = runAsRequest(() => h.batcher.run('bot1', 'a'));
    h.advance(1500);
    const onTime = runAsRequest(() => h.batcher.run('bot2', 'b'));
    expect(h.batcher.load()).toMatchObject({ waiting: 2, oldestWaitMs: 1500 });
    h.advance(500);
    h.alone[0]?.done.resolve('X');
    await blocker;
    const refused = await late.catch((e: unknown) => e);
    expect(isOverloadedError(refused)).toBe(true);
    await settle();
    expect(h.alone.map((x) => x.item)).toEqual(['x', 'b']);
    h.alone[1]?.done.resolve('B');
    expect(await onTime).toBe('B');
  });

  it('runs a batch outside every request, and a purchase sent back to run alone in its own request’s context', async () => {
    const store = new AsyncLocalStorage<string>();
    const seen: unknown[] = [];
    let release!: () => void;
    const blocked = new Promise<void>((r) => {
      release = r;
    });
    let first = true;
    const batcher = new SpendBatcher<string, string>(
      { size: 32, concurrency: 1, maxWaitMs: 1000 },
      async (item) => {
        seen.push(store.getStore());
        if (first) {
          first = false;
          await blocked;
        }
        return item.toUpperCase();
      },
      async (items) => {
        // Started from the end of request x's call, whose work had begun: outside it, the batch's
        // wait for a session is bounded as work outside a request.
        seen.push(requestStanding().bounded ? 'outside' : 'inside a begun request');
        return items.map(() => 'alone' as const);
      },
    );
    const x = store.run('request x', () => inBegunRequest(() => batcher.run('x', 'x')));
    const a = store.run('request a', () => batcher.run('bot1', 'a'));
    const b = store.run('request b', () => batcher.run('bot2', 'b'));
    release();
    expect(await Promise.all([x, a, b])).toEqual(['X', 'A', 'B']);
    expect(seen).toEqual(['request x', 'outside', 'request a', 'request b']);
  });
});
