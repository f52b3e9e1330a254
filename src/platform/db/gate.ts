import { AsyncLocalStorage } from 'node:async_hooks';
import { ApiError } from '../errors.ts';

// The instance's sessions with its database, counted and bounded in one place for both drivers:
// PostgreSQL's pool connections, and the calls the embedded database's thread runs. A statement or
// transaction takes a session first; when all are taken it waits in line, at most `maxWaitMs`,
// and is then refused with OverloadedError before it did anything. That is the difference between
// an instance past its capacity (answered `503 overloaded` with Retry-After, src/app.ts) and a
// database that does not answer (`503 service_unavailable`): with pg-pool's own queue both ended
// in the same "timeout exceeded when trying to connect" (issue 32). The pool below never queues:
// it is asked for a connection only with a session in hand, so its connection timeout covers
// reaching the database alone.

// "Refused before it did anything" holds per request, not per statement: a request's first
// session is the admission (refused `overloaded` when none comes free in time), and once a request
// has had one, its work has begun — a statement may have committed — so its later statements wait
// their turn instead of being refused half-way through (a checkout answered `overloaded` after
// its purchase committed would invite a retry that buys twice). The one exception: a statement
// asked for while the request holds a session (a query beside its own open transaction) keeps the
// bound, since waiting without one there could wait on itself. Requests are marked by the app's
// first hook (runAsRequest, src/platform/overload.ts trackRequestWork); work outside a request
// (jobs, start-up) keeps the bound on every statement.

interface RequestWork {
  /** A session was handed to this request: its work has begun. */
  started: boolean;
  /** Sessions the request holds now. */
  held: number;
}

const requestWork = new AsyncLocalStorage<RequestWork>();

/** Runs `fn` as one request's work: its first session is its admission (see above). */
export function runAsRequest<T>(fn: () => T): T {
  return requestWork.run({ started: false, held: 0 }, fn);
}

function handedTo(work: RequestWork | undefined): void {
  if (!work) return;
  work.started = true;
  work.held++;
}

/**
 * A request's standing, for work done on its behalf outside its own async context (a batch of
 * purchases, src/spend/batch.ts, runs several requests' statements as one): whether a wait for it
 * is bounded now (it has not begun: refusing it `overloaded` drops nothing), and marking it begun
 * when its work is handed a session.
 */
export interface RequestStanding {
  readonly bounded: boolean;
  begin(): void;
}

/** The current request's standing (work outside a request: bounded, nothing to mark). */
export function requestStanding(): RequestStanding {
  const work = requestWork.getStore();
  return {
    bounded: !(work?.started && work.held === 0),
    begin: () => {
      if (work) work.started = true;
    },
  };
}

/** Runs `fn` as work outside any request (a batch of several requests' statements). */
export function outsideRequests<T>(fn: () => T): T {
  return requestWork.exit(fn);
}

/** Seconds an `overloaded` answer asks the client to wait (Retry-After and `retry_after_seconds`). */
export const OVERLOAD_RETRY_AFTER_SECONDS = 1;

/**
 * The instance is past its capacity: a request is refused before it started its work, and may be
 * sent again after Retry-After. An ApiError (503 `overloaded`), so that every error handler answers
 * it as what it is; the database layer raises it when no session comes free in time.
 */
export class OverloadedError extends ApiError {
  constructor(message: string) {
    super('overloaded', message, { retry_after_seconds: OVERLOAD_RETRY_AFTER_SECONDS });
    this.name = 'OverloadedError';
  }
}

export function isOverloadedError(error: unknown): error is ApiError {
  return error instanceof ApiError && error.code === 'overloaded';
}

/** Upper bounds (seconds) of the session wait histogram (`botpay_db_pool_wait_seconds`). */
export const WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5] as const;

/** What /readyz, /metrics and load shedding read of a driver's sessions. */
export interface DbLoad {
  /** Sessions the instance may hold at once (PostgreSQL: DATABASE_POOL_SIZE). */
  size: number;
  /** Sessions taken now. */
  inUse: number;
  /** Statements and transactions waiting for a session. */
  waiting: number;
  /** How long the first in line has waited (ms); 0 when none waits. */
  oldestWaitMs: number;
  /** The longest a statement waits before it is refused (ms). */
  maxWaitMs: number;
  /** Every session taken so far: waits per bucket of WAIT_BUCKETS (not cumulative; last slot: above all; live, not a copy). */
  waitCounts: readonly number[];
  waitSumSeconds: number;
  /** Statements refused because no session came free in time. */
  refused: number;
}

interface Waiter {
  since: number;
  resolve(): void;
  timer: NodeJS.Timeout | undefined;
  done: boolean;
}

export class SessionGate {
  #inUse = 0;
  /** First in line at `#head` (no shift() per release); refused waiters stay until passed over. */
  #queue: (Waiter | undefined)[] = [];
  #head = 0;
  #waiting = 0;
  readonly #waitCounts = new Array<number>(WAIT_BUCKETS.length + 1).fill(0);
  #waitSum = 0;
  #refused = 0;

  constructor(
    readonly size: number,
    readonly maxWaitMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Takes a session at once if one is free and nobody waits (no promise); else false. */
  tryAcquire(): boolean {
    if (this.#inUse >= this.size || this.#waiting > 0) return false;
    this.#inUse++;
    this.#observe(0);
    handedTo(requestWork.getStore());
    return true;
  }

  /**
   * A session: at once when free, else after the ones ahead in line. Rejects with OverloadedError
   * after `maxWaitMs` unless `unbounded` (work that must not be dropped, e.g. announcing commits)
   * or asked for by a request whose work has begun and that holds no session now (see above).
   */
  acquire(unbounded = false): Promise<void> {
    if (this.tryAcquire()) return Promise.resolve();
    const work = requestWork.getStore();
    const bounded = !unbounded && !(work?.started && work.held === 0);
    return new Promise<void>((resolve, reject) => {
      const handOver = () => {
        handedTo(work);
        resolve();
      };
      const waiter: Waiter = { since: this.now(), resolve: handOver, timer: undefined, done: false };
      if (bounded) {
        waiter.timer = setTimeout(() => {
          waiter.done = true;
          this.#waiting--;
          this.#refused++;
          this.#skipDone();
          reject(
            new OverloadedError(
              `The service is at capacity (no database session came free within ${this.maxWaitMs} ms); retry in ${OVERLOAD_RETRY_AFTER_SECONDS} s.`,
            ),
          );
        }, this.maxWaitMs);
      }
      this.#queue.push(waiter);
      this.#waiting++;
    });
  }

  /** Gives a session back: to the first in line, if any. */
  release(): void {
    const work = requestWork.getStore();
    if (work && work.held > 0) work.held--;
    this.#skipDone();
    const next = this.#queue[this.#head];
    if (!next) {
      this.#inUse--;
      return;
    }
    this.#queue[this.#head++] = undefined;
    next.done = true;
    this.#waiting--;
    if (next.timer) clearTimeout(next.timer);
    this.#observe(this.now() - next.since);
    this.#skipDone();
    next.resolve();
  }

  /** How long the first in line has waited (ms); 0 when nobody waits. */
  oldestWaitMs(): number {
    const first = this.#waiting > 0 ? this.#queue[this.#head] : undefined;
    return first ? this.now() - first.since : 0;
  }

  load(): DbLoad {
    return {
      size: this.size,
      inUse: this.#inUse,
      waiting: this.#waiting,
      oldestWaitMs: this.oldestWaitMs(),
      maxWaitMs: this.maxWaitMs,
      waitCounts: this.#waitCounts,
      waitSumSeconds: this.#waitSum,
      refused: this.#refused,
    };
  }

  #observe(ms: number): void {
    const seconds = ms / 1000;
    let i = 0;
    while (i < WAIT_BUCKETS.length && seconds > (WAIT_BUCKETS[i] as number)) i++;
    this.#waitCounts[i] = (this.#waitCounts[i] ?? 0) + 1;
    this.#waitSum += seconds;
  }

  /** Moves `#head` past refused waiters; starts the array afresh once it is passed or mostly used. */
  #skipDone(): void {
    while (this.#head < this.#queue.length && this.#queue[this.#head]?.done !== false) this.#head++;
    if (this.#head === this.#queue.length) {
      this.#queue = [];
      this.#head = 0;
    } else if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
  }
}
