import { AsyncLocalStorage } from 'node:async_hooks';
import {
  isOverloadedError,
  OVERLOAD_RETRY_AFTER_SECONDS,
  OverloadedError,
  outsideRequests,
  type RequestStanding,
  requestStanding,
} from '../platform/db/gate.ts';

// Group commit for purchases that run on their own (spendAlone, src/spend/run.ts): while the
// instance's purchase calls are all busy, the purchases that arrive wait here, and the next free
// call runs up to `size` of them in one transaction (spend_run_batch.sql: one subtransaction per
// purchase, one commit for all). An idle service runs each purchase at once as its own statement,
// as before; under load a purchase waits at most for the calls in flight, and a transaction's fixed
// costs (start, commit, WAL flush, round trip, a cold backend's first statements) are shared.
//
// What a bot observes does not change: each purchase is decided by the same call with the same
// parameters, in a subtransaction that undoes exactly what its own statement would have undone; a
// batch's items commit together, so an answer is sent only after its rows are durable. An item the
// batch could not run (another item of its owner ran in it: `later`) waits for the next batch, ahead
// of newer arrivals; one that failed with anything but a refusal (its subtransaction undone) runs
// again on its own, where its error is answered as it always was. A batch that failed as a whole is
// each item's failure, as its own statement's would have been, and nothing is run again: a
// transaction that failed at its commit may have committed. The one exception is a batch that got
// no database session in time (nothing ran): see together().
//
// A batch holds one purchase per key: the caller's key is the bot's owner when it knows it (learned
// from earlier answers, src/spend/run.ts), since spend_run_batch runs one purchase per owner and
// answers the others `later`. A call that runs longer than STALL_MS (a purchase waiting on a lock, a
// deadlock being detected) stops counting against the calls in flight, so that one stalled batch
// does not hold up every purchase behind it.
//
// Overload (src/platform/db/gate.ts): a purchase waiting here is a request waiting for the
// database, bounded like a wait for a session (DATABASE_POOL_WAIT_MS, refused `overloaded` with
// nothing written if its request had not begun), and counted by the load shedder (src/app.ts).

export interface SpendBatchOptions {
  /** Purchases per transaction at most (1: no batching). */
  size: number;
  /** Purchase calls of this instance in flight at once, batches and purchases alone alike. */
  concurrency: number;
  /**
   * How long a purchase may wait here before it is refused `overloaded` with nothing written, if
   * its request had not begun (DATABASE_POOL_WAIT_MS: the same bound as a wait for a session).
   */
  maxWaitMs: number;
  /**
   * A call running this long counts as stalled (a purchase waiting on a lock, a deadlock being
   * detected) and no longer counts against `concurrency`: purchases behind it get a call of their
   * own instead of waiting for it. Default STALL_MS.
   */
  stallMs?: number;
}

/** A call slower than this has stalled (a batch of 32 takes a few milliseconds). */
export const STALL_MS = 100;

interface Call {
  since: number;
}

/** What a batch answers for one item: its result, run it in the next batch, or run it on its own. */
export type BatchItemAnswer<R> = { result: R } | 'later' | 'alone';

interface Waiting<T, R> {
  key: string;
  item: T;
  since: number;
  standing: RequestStanding;
  /** Runs a function in the request's own async context (its statements are its own again). */
  inContext: <F>(fn: () => F) => F;
  resolve: (value: R) => void;
  reject: (error: unknown) => void;
}

/**
 * A queue of purchases for one database. `run(key, item)` answers the item's result, from its own
 * statement (`runAlone`) when a call is free and nothing waits, else from a batch (`runBatch`).
 * Items with the same key (the bot) never share a batch.
 */
export class SpendBatcher<T, R> {
  private waiting: Waiting<T, R>[] = [];
  private readonly calls = new Set<Call>();
  private readonly idleWaiters: Array<() => void> = [];
  private stallTimer: ReturnType<typeof setTimeout> | undefined;
  private batches = 0;
  private batched = 0;

  constructor(
    private readonly options: SpendBatchOptions,
    private readonly runAlone: (item: T) => Promise<R>,
    private readonly runBatch: (items: T[]) => Promise<BatchItemAnswer<R>[]>,
    private readonly now: () => number = () => performance.now(),
  ) {}

  run(key: string, item: T): Promise<R> {
    if (this.waiting.length === 0 && this.calls.size < this.capacity()) return this.alone(item, this.begin());
    return new Promise((resolve, reject) => {
      this.waiting.push({
        key,
        item,
        since: this.now(),
        standing: requestStanding(),
        inContext: AsyncLocalStorage.snapshot(),
        resolve,
        reject,
      });
      this.pump();
    });
  }

  /**
   * Resolves once nothing waits and no call is in flight, or after `timeoutMs` (shutdown: the
   * purchases of requests whose clients went away still run before the database closes).
   */
  idle(timeoutMs: number): Promise<void> {
    if (this.waiting.length === 0 && this.calls.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      timer.unref?.();
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** Purchases waiting now and the oldest one's wait; calls in flight; batches and their purchases so far. */
  load(): { waiting: number; oldestWaitMs: number; inFlight: number; batches: number; batched: number } {
    const first = this.waiting[0];
    return {
      waiting: this.waiting.length,
      oldestWaitMs: first ? this.now() - first.since : 0,
      inFlight: this.calls.size,
      batches: this.batches,
      batched: this.batched,
    };
  }

  /** Calls allowed in flight now: `concurrency`, plus one for each call that stalled. */
  private capacity(): number {
    const stallMs = this.options.stallMs ?? STALL_MS;
    const now = this.now();
    let stalled = 0;
    for (const c of this.calls) if (now - c.since >= stallMs) stalled++;
    return this.options.concurrency + stalled;
  }

  private begin(): Call {
    const call = { since: this.now() };
    this.calls.add(call);
    return call;
  }

  private end(call: Call): void {
    this.calls.delete(call);
    this.pump();
    if (this.waiting.length === 0 && this.calls.size === 0) {
      for (const wake of this.idleWaiters.splice(0)) wake();
    }
  }

  /** Runs one item as its own statement; in `call` (counted in flight, ended with it) or outside the count. */
  private async alone(item: T, call: Call | null): Promise<R> {
    try {
      return await this.runAlone(item);
    } finally {
      if (call) this.end(call);
    }
  }

  private pump(): void {
    this.refuseOverdue();
    while (this.waiting.length > 0 && this.calls.size < this.capacity()) {
      const batch = this.take();
      const call = this.begin();
      if (batch.length === 1) {
        // One waiting purchase: its own statement, no subtransaction, in its request's context.
        const w = batch[0] as Waiting<T, R>;
        w.inContext(() => this.alone(w.item, call)).then(w.resolve, w.reject);
        continue;
      }
      void this.together(batch, call);
    }
    this.watchStalls();
  }

  /** While purchases wait, looks again when the next call in flight would count as stalled. */
  private watchStalls(): void {
    if (this.stallTimer !== undefined || this.waiting.length === 0 || this.calls.size === 0) return;
    const stallMs = this.options.stallMs ?? STALL_MS;
    let first = Number.POSITIVE_INFINITY;
    const now = this.now();
    for (const c of this.calls) if (now - c.since < stallMs) first = Math.min(first, c.since);
    if (first === Number.POSITIVE_INFINITY) return;
    this.stallTimer = setTimeout(
      () => {
        this.stallTimer = undefined;
        this.pump();
      },
      Math.max(1, first + stallMs - now),
    );
    this.stallTimer.unref?.();
  }

  /** Refuses the purchases that waited past the bound before their requests began: nothing of them ran. */
  private refuseOverdue(): void {
    const now = this.now();
    for (let i = 0; i < this.waiting.length; ) {
      const w = this.waiting[i] as Waiting<T, R>;
      if (w.standing.bounded && now - w.since >= this.options.maxWaitMs) {
        this.waiting.splice(i, 1);
        w.reject(
          new OverloadedError(
            `The service is at capacity (a purchase waited ${this.options.maxWaitMs} ms for the database); retry in ${OVERLOAD_RETRY_AFTER_SECONDS} s.`,
          ),
        );
      } else i++;
    }
  }

  /** The oldest waiting purchases, one per key, up to the batch size; the rest keep their places. */
  private take(): Waiting<T, R>[] {
    const batch: Waiting<T, R>[] = [];
    const rest: Waiting<T, R>[] = [];
    const keys = new Set<string>();
    // One pass (a bot flooding the queue must not make every batch cost its length squared).
    for (const w of this.waiting) {
      if (batch.length < this.options.size && !keys.has(w.key)) {
        keys.add(w.key);
        batch.push(w);
      } else rest.push(w);
    }
    this.waiting = rest;
    return batch;
  }

  private async together(batch: Waiting<T, R>[], call: Call): Promise<void> {
    this.batches++;
    this.batched += batch.length;
    let answers: BatchItemAnswer<R>[];
    try {
      // Outside every request: the batch's session is its own, bounded as work outside a request.
      answers = await outsideRequests(() => this.runBatch(batch.map((w) => w.item)));
      if (answers.length !== batch.length)
        throw new Error('spend_run_batch answered another number of items');
    } catch (error) {
      // No session came free for the batch (nothing ran): its requests that had not begun are
      // refused as their own statements would have been, the others run on their own. Any other
      // failure is each item's, as its own statement's would have been: a batch that failed at
      // its commit may have committed, so its items are never run again here.
      const overloaded = isOverloadedError(error);
      for (const w of batch) {
        if (!overloaded) w.reject(error);
        else if (w.standing.bounded) w.reject(error);
        else w.inContext(() => this.alone(w.item, null)).then(w.resolve, w.reject);
      }
      this.end(call);
      return;
    }
    const later: Waiting<T, R>[] = [];
    batch.forEach((w, i) => {
      const a = answers[i] as BatchItemAnswer<R>;
      if (a === 'later') later.push(w);
      else if (a === 'alone') w.inContext(() => this.alone(w.item, null)).then(w.resolve, w.reject);
      else {
        w.standing.begin();
        w.resolve(a.result);
      }
    });
    // Ahead of newer arrivals: they came first.
    this.waiting.unshift(...later);
    this.end(call);
  }
}
