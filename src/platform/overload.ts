import { AsyncResource } from 'node:async_hooks';
import { type IntervalHistogram, monitorEventLoopDelay } from 'node:perf_hooks';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../config.ts';
import type { DbLoad } from './db/gate.ts';
import { OVERLOAD_RETRY_AFTER_SECONDS, OverloadedError, runAsRequest } from './db/gate.ts';
import type { Db } from './db/port.ts';

// Load shedding (docs/deploy.md, "Overload"): past its capacity an instance refuses new requests at
// once, `503 overloaded` with Retry-After, before they start any work, instead of queueing them
// until clients time out or the pool's wait ends in an error. Decided per request in the app's
// first hooks (src/app.ts) from two signals:
// - the database sessions (platform/db/gate.ts): the first statement in line has waited half of
//   DATABASE_POOL_WAIT_MS. A statement that waits all of it is refused by the gate itself, with the
//   same answer; a request admitted a moment earlier is not cut off half-way through its work.
// - the event loop (SHED_EVENT_LOOP_DELAY_MS): its delay in each of the last two seconds, as a mean
//   weighted by time (how late the loop was at an average moment: a loop stalled 300 ms at a time
//   reads about 300, one that turns every millisecond about 0, however many turns each has). Two
//   windows, so that one long task (the start-up's route compilation, a large garbage collection)
//   is not taken for a loop that keeps falling behind.
// Health, readiness and metrics are never shed, and /readyz reports these signals apart from the
// database's reachability: a busy instance stays ready (it answers quickly, if only "overloaded").

export type ShedReason = 'database_wait' | 'event_loop_delay';

/** How often the event loop's delay is summed up; also the window the shedding decision reads. */
export const EVENT_LOOP_WINDOW_MS = 1_000;
/** Sampling period of the delay histogram (its samples include it; it is subtracted). */
const RESOLUTION_MS = 10;
/** Upper bounds (seconds) of `botpay_event_loop_delay_seconds`: the longest delay of each window. */
export const EVENT_LOOP_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const;

/**
 * The event loop's delay (how late a timer due now runs), summed up per window of
 * EVENT_LOOP_WINDOW_MS: the last window's delay (a mean weighted by time) and maximum, the smaller
 * of the last two delays (`sustainedMs`, what shedding compares), and the maxima of all windows per
 * bucket for /metrics.
 */
export class EventLoopMonitor {
  #histogram: IntervalHistogram | undefined;
  #timer: NodeJS.Timeout | undefined;
  delayMs = 0;
  maxMs = 0;
  sustainedMs = 0;
  readonly windowMaxCounts = new Array<number>(EVENT_LOOP_BUCKETS.length + 1).fill(0);
  windowMaxSum = 0;

  start(): void {
    if (this.#timer) return;
    this.#histogram = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
    this.#histogram.enable();
    this.#timer = setInterval(() => this.#close(), EVENT_LOOP_WINDOW_MS);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#histogram?.disable();
    this.#histogram = undefined;
  }

  #close(): void {
    const h = this.#histogram;
    if (!h || h.count === 0) return;
    // The samples are how late each timer ran (plus the period). Weighted by their own length,
    // their mean is Σd² ÷ Σd = (σ² + μ²) ÷ μ: one long stall counts for its whole duration, not as
    // one sample among many short ones (a median or plain mean would miss a loop stalled most of
    // the time but turning briefly between stalls).
    const mean = h.mean / 1e6;
    const sd = h.stddev / 1e6;
    const delay = Math.max(0, (sd * sd + mean * mean) / Math.max(mean, 1e-9) - RESOLUTION_MS);
    this.sustainedMs = Math.min(delay, this.delayMs);
    this.delayMs = delay;
    this.maxMs = Math.max(0, h.max / 1e6 - RESOLUTION_MS);
    h.reset();
    const seconds = this.maxMs / 1000;
    let i = 0;
    while (i < EVENT_LOOP_BUCKETS.length && seconds > (EVENT_LOOP_BUCKETS[i] as number)) i++;
    this.windowMaxCounts[i] = (this.windowMaxCounts[i] ?? 0) + 1;
    this.windowMaxSum += seconds;
  }
}

/** A line of work waiting for the database outside the session gate. */
export interface QueueLoad {
  waiting: number;
  oldestWaitMs: number;
}

/** What /readyz says about the instance's own load. */
export interface LoadReport {
  shedding: boolean;
  reason: ShedReason | null;
  database_sessions: { size: number; in_use: number; waiting: number; oldest_wait_ms: number };
  /** Purchases waiting for one of the instance's purchase calls (SPEND_CONCURRENCY). */
  purchases_waiting: { waiting: number; oldest_wait_ms: number };
  event_loop_delay_ms: { last_second: number; max: number };
}

export class LoadShedder {
  constructor(
    private readonly db: Db,
    private readonly config: Pick<Config, 'shedEventLoopDelayMs'>,
    readonly eventLoop: EventLoopMonitor,
    /** Purchases waiting for a purchase call (src/spend/batch.ts): a wait for the database too. */
    private readonly purchases: () => QueueLoad = () => ({ waiting: 0, oldestWaitMs: 0 }),
  ) {}

  /** Why a request arriving now should be refused, or undefined to let it in. */
  reason(load: DbLoad = this.db.load(), queued: QueueLoad = this.purchases()): ShedReason | undefined {
    if (load.waiting > 0 && load.oldestWaitMs * 2 >= load.maxWaitMs) return 'database_wait';
    if (queued.waiting > 0 && queued.oldestWaitMs * 2 >= load.maxWaitMs) return 'database_wait';
    const limit = this.config.shedEventLoopDelayMs;
    if (limit > 0 && this.eventLoop.sustainedMs >= limit) return 'event_loop_delay';
    return undefined;
  }

  /** The answer to a request refused for `reason`. */
  refuse(reason: ShedReason): OverloadedError {
    return new OverloadedError(
      reason === 'database_wait'
        ? `The service is at capacity (requests are waiting for the database); retry in ${OVERLOAD_RETRY_AFTER_SECONDS} s.`
        : `The service is at capacity (its event loop is ${Math.round(this.eventLoop.sustainedMs)} ms behind); retry in ${OVERLOAD_RETRY_AFTER_SECONDS} s.`,
    );
  }

  report(): LoadReport {
    const load = this.db.load();
    const queued = this.purchases();
    const reason = this.reason(load, queued) ?? null;
    return {
      shedding: reason !== null,
      reason,
      database_sessions: {
        size: load.size,
        in_use: load.inUse,
        waiting: load.waiting,
        oldest_wait_ms: Math.round(load.oldestWaitMs),
      },
      purchases_waiting: { waiting: queued.waiting, oldest_wait_ms: Math.round(queued.oldestWaitMs) },
      event_loop_delay_ms: {
        last_second: Math.round(this.eventLoop.delayMs * 10) / 10,
        max: Math.round(this.eventLoop.maxMs * 10) / 10,
      },
    };
  }
}

const REQUEST_SCOPE = Symbol('botpay.requestScope');
type ScopedRequest = FastifyRequest & { [REQUEST_SCOPE]?: AsyncResource };

/**
 * Marks each request's work for the sessions gate (runAsRequest in platform/db/gate.ts): its first
 * database session is its admission, later ones wait their turn. Registered before every other
 * hook. The handler may run from the request stream's `end` event, whose async context is the
 * connection's rather than this hook's (Node's streams do not carry contexts across events); so the
 * hook keeps a resource of the request's context and preValidation (the first hook after the body
 * is read) re-enters it, as @fastify/request-context does. test/foundation/requestAdmission.test.ts
 * sends a body after its headers over a real socket.
 */
export function trackRequestWork(app: FastifyInstance): void {
  app.addHook('onRequest', (request, _reply, done) => {
    runAsRequest(() => {
      const scope = new AsyncResource('botpay.request');
      (request as ScopedRequest)[REQUEST_SCOPE] = scope;
      scope.runInAsyncScope(done);
    });
  });
  app.addHook('preValidation', (request, _reply, done) => {
    const scope = (request as ScopedRequest)[REQUEST_SCOPE];
    if (scope) scope.runInAsyncScope(done);
    else done();
  });
}
