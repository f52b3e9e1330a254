import { EVENTS_CHANNEL } from '../events/outbox.ts';
import type { AppContext } from '../platform/context.ts';
import { namedCall } from '../platform/db/named.ts';
import { randomBase32 } from '../platform/ids.ts';
import { memoize } from '../platform/memo.ts';
import { DEGRADED_AFTER, summarise, UNREACHABLE_AFTER } from './health.ts';
import {
  type AttemptResult,
  createWebhookSender,
  type DeliveryTarget,
  signatureHeaders,
  USER_AGENT,
  type WebhookSender,
} from './sender.ts';
import { REFUSED_PREFIX, type Resolver } from './ssrf.ts';
import { parkUntilTunnel } from './tunnelWait.ts';

// The delivery worker. Each round claims due deliveries (FOR UPDATE SKIP LOCKED, then a lease:
// locked_until + lock_token on the delivery's row in webhook_queue, the narrow table of pending
// deliveries, migration 0046) within two bounds: PER_BOT_IN_FLIGHT per bot across the whole
// deployment, so one slow or dead endpoint holds at most that many slots whatever the number of
// instances (a bot's in-flight count is its rows under a live lease, read inside the claim, and
// claims are serialised by a transaction-scoped advisory lock so that two instances cannot both
// take the last slot), and MAX_IN_FLIGHT in all per instance. A claim is one round trip (the SQL
// function webhook_claim, src/migrations/functions/) and returns its rows in event order (the
// events' sequence, copied onto the delivery row: migration 0040; not the id, random within a ms). Sends run
// concurrently; their results are recorded in batches by one call (webhook_record_and_claim: each
// delivery row written once with its result, its queue row deleted or put back for a retry, every
// attempt in webhook_attempts and the bots' health; not the event, 0052) that,
// while more is due, also claims the next rows in the same round trip and transaction: a slot stays
// taken until its attempt is recorded, and is taken again at once. One claim runs at a time (a
// recording call waits for a claim of the loop under way), so each bot's sends start in the order
// of its events. The loop claims on NOTIFY botpay_events (sent after commit by the events_wake
// trigger, 0001), when a recording call could not claim and no send is left to be recorded, and on
// a safety poll for retries that come due.
//
// At least once: the lease outlives any attempt (2 × timeout + 5 s), so a worker that dies after
// sending but before recording leaves a lease that expires, and the delivery is sent again. A result
// recorded after its lease was taken over is ignored (lock_token mismatch); the new holder records.

export const PER_BOT_IN_FLIGHT = 8;
export const MAX_IN_FLIGHT = 256;
const POLL_MS = 1_000;
// Due rows looked at per claim: enough to fill every bot's free slots without sorting the whole queue.
const CANDIDATES_PER_SLOT = 4;
const MIN_CANDIDATES = 200;
/**
 * How often the worker holds back the backlog of bots at their bound (webhook_park, migration 0058),
 * so that no claim walks past it, and how many due rows one such call looks at.
 */
const PARK_EVERY_MS = 2_000;
const PARK_SCAN = 10_000;
/** At most this long a few finished results wait for more before a recording call (flush). */
const RECORD_WAIT_MS = 5;
/** Decrypted secrets kept in memory (by ciphertext); the map starts over when it is full. */
const PLAINTEXTS_MAX = 10_000;

interface ClaimedRow {
  id: string;
  event_id: string;
  bot_id: string;
  event_type: string;
  attempts: number;
  body: string;
  callback_url: string | null;
  tunnel_hostname: string | null;
  webhook_path: string | null;
  hooks_token_enc: string | null;
  webhook_secret_enc: string;
  /** The previous secret while its rotation overlap lasts, else null. */
  webhook_secret_prev_enc: string | null;
  [key: string]: unknown;
}

// The claim is the SQL function webhook_claim (src/migrations/functions/webhook_claim.sql): the advisory lock that serialises
// claims across instances and the claim itself, in one round trip.
const CLAIM_SQL = 'SELECT * FROM webhook_claim($1, $2, $3, $4, $5, $6, $7)';

// Recording is the SQL function webhook_record_and_claim (src/migrations/functions/): one statement
// writes the batch (the queue rows, the deliveries, every attempt in webhook_attempts and the bots'
// health) and, while more is due, the same call claims the next rows through webhook_claim, so the
// slots the batch gives back are taken again in that round trip and transaction. It runs through
// Db.write, not query: the call announces the bots whose deliveries arrived (their status's
// pending_messages changed, 0052), and `query` takes a SELECT for a read and would drop that.
interface RecordInput {
  batch: Finished[];
  changes: ReturnType<typeof summarise>;
  now: number;
  claim: ClaimArgs | null;
  retryDelays: readonly number[];
  leaseMs: number;
  perBot: number;
}
const recordCall = namedCall<RecordInput>('webhook_record_and_claim', {
  p_ids: (r) => r.batch.map((f) => f.id),
  p_tokens: (r) => r.batch.map((f) => f.token),
  p_ok: (r) => r.batch.map((f) => f.result.ok),
  p_status: (r) => r.batch.map((f) => f.result.status),
  p_excerpt: (r) => r.batch.map((f) => f.result.excerpt),
  p_error: (r) => r.batch.map((f) => f.result.error),
  p_duration: (r) => r.batch.map((f) => f.result.durationMs),
  p_via: (r) => r.batch.map((f) => f.result.via),
  p_now: (r) => new Date(r.now),
  p_delays: (r) => r.retryDelays,
  p_health_bots: (r) => r.changes.map((c) => c.botId),
  p_health_reset: (r) => r.changes.map((c) => c.reset),
  p_health_failures: (r) => r.changes.map((c) => c.failures),
  p_degraded_after: () => DEGRADED_AFTER,
  p_unreachable_after: () => UNREACHABLE_AFTER,
  p_until: (r) => new Date(r.now + r.leaseMs),
  p_token: (r) => r.claim?.token ?? '',
  p_per_bot: (r) => r.perBot,
  p_room: (r) => r.claim?.room ?? 0,
  p_skip: (r) => r.claim?.saturated ?? [],
  p_candidates: (r) => r.claim?.candidates ?? 0,
});
const RECORD_SQL = `SELECT * FROM ${recordCall.sql}`;

interface ClaimArgs {
  token: string;
  room: number;
  saturated: string[];
  candidates: number;
}

interface Finished {
  id: string;
  token: string;
  botId: string;
  result: AttemptResult;
}

export interface DeliveryWorkerOptions {
  /** Injected DNS for SSRF tests (the edge of the world). */
  resolver?: Resolver;
  perBotInFlight?: number;
  maxInFlight?: number;
  pollMs?: number;
}

export class DeliveryWorker {
  private readonly sender: WebhookSender;
  private readonly perBot: number;
  private readonly maxInFlight: number;
  private readonly pollMs: number;
  private readonly leaseMs: number;
  private readonly inFlightByBot = new Map<string, number>();
  /** Called when no send is left in flight (drain). */
  private sendsDone: (() => void)[] = [];
  private finished: Finished[] = [];
  private flushing: Promise<void> | undefined;
  /** Set while finished results wait for more before they are recorded (flush). */
  private recordTimer: NodeJS.Timeout | undefined;
  private inFlight = 0;
  /** A claim is under way (the loop's or a recording call's): one at a time (see reserveClaim). */
  private claiming = false;
  /** A claim was skipped because another was under way: claim again when it is done. */
  private claimSkipped = false;
  /** A skipped claim is left to the next recording call, which then starts at once (recordNow). */
  private claimWanted = false;
  /** Settles when the loop's claim under way has ended. */
  private claimDone: Promise<void> | undefined;
  private stopped = true;
  private wakeRequested = false;
  private moreDue = false;
  private wakeUp: (() => void) | undefined;
  private loopDone: Promise<void> | undefined;
  private unlisten: (() => Promise<void>) | undefined;
  private parkTimer: NodeJS.Timeout | undefined;
  private parking: Promise<unknown> | undefined;
  private stopping: Promise<void> | undefined;

  constructor(
    private readonly ctx: AppContext,
    options: DeliveryWorkerOptions = {},
  ) {
    this.perBot = options.perBotInFlight ?? PER_BOT_IN_FLIGHT;
    this.maxInFlight = options.maxInFlight ?? MAX_IN_FLIGHT;
    this.pollMs = options.pollMs ?? POLL_MS;
    this.leaseMs = 2 * ctx.config.webhookTimeoutMs + 5_000;
    this.sender = createWebhookSender({
      timeoutMs: ctx.config.webhookTimeoutMs,
      allowPrivateTargets: ctx.config.allowPrivateWebhookTargets,
      ...(options.resolver ? { resolver: options.resolver } : {}),
      ...(ctx.tunnelRelay ? { tunnelRelay: ctx.tunnelRelay } : {}),
    });
  }

  /**
   * One round for tests and tools: claims what is due now, sends it, and records every result
   * before returning. Returns the number of attempts made.
   */
  async runOnce(): Promise<number> {
    const claimed = await this.claimAndDispatch();
    await this.drain();
    return claimed;
  }

  /** Starts the background loop (LISTEN + safety poll). */
  async start(): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    this.stopping = undefined;
    this.unlisten = await this.ctx.db.listen(EVENTS_CHANNEL, () => this.wake());
    this.loopDone = this.loop();
    // Maintenance, not a schedule of the service's clock: real time between calls.
    this.parkTimer = setInterval(() => {
      if (this.parking) return;
      this.parking = this.park()
        .catch((error: unknown) => this.ctx.logger.warn({ err: error }, 'webhook park failed'))
        .finally(() => {
          this.parking = undefined;
        });
    }, PARK_EVERY_MS);
    this.parkTimer.unref?.();
  }

  /**
   * Holds back the due rows of the bots at their bound beyond their next few, and brings held rows
   * back where slots were freed (webhook_park: the claim then never walks past a bot's backlog).
   * The worker calls it every PARK_EVERY_MS; tests call it directly.
   */
  async park(): Promise<{ held: number; released: number }> {
    const rows = await this.ctx.db.query<{ held: number; released: number }>(
      'SELECT * FROM webhook_park($1, $2, $3)',
      [new Date(this.ctx.clock.now()), this.perBot, PARK_SCAN],
    );
    return rows[0] ?? { held: 0, released: 0 };
  }

  /** Stops claiming, lets in-flight attempts finish and records them. Calling it again waits for the first call. */
  stop(): Promise<void> {
    this.stopping ??= this.stopNow();
    return this.stopping;
  }

  private async stopNow(): Promise<void> {
    this.stopped = true;
    if (this.parkTimer) clearInterval(this.parkTimer);
    this.parkTimer = undefined;
    this.wake();
    await this.loopDone;
    await this.parking;
    await this.unlisten?.();
    await this.drain();
    if (this.recordTimer) clearTimeout(this.recordTimer);
    this.recordTimer = undefined;
    await this.sender.close();
  }

  wake(): void {
    this.wakeRequested = true;
    const fn = this.wakeUp;
    this.wakeUp = undefined;
    fn?.();
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      this.wakeRequested = false;
      try {
        if (this.inFlight < this.maxInFlight) await this.claimAndDispatch();
      } catch (error) {
        this.ctx.logger.warn({ err: error }, 'webhook claim failed');
        await this.sleep(this.pollMs);
        continue;
      }
      if (this.stopped) break;
      if (this.wakeRequested) continue;
      // More work waits only if this round was cut short by a bound; then a finishing send wakes us.
      await this.sleep(this.pollMs);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wakeUp = undefined;
        resolve();
      }, ms);
      timer.unref?.();
      this.wakeUp = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /**
   * The arguments of a claim (webhook_claim's parameters after p_now), or null when this instance
   * has no free slot or another claim is under way. One claim at a time: the rows of one claim are
   * sent before those of the next, so each bot's sends start in the order of its events, and two
   * claims never take more than MAX_IN_FLIGHT together. `endClaim` ends it.
   */
  private reserveClaim(): ClaimArgs | null {
    if (this.claiming) {
      this.claimSkipped = true;
      return null;
    }
    const room = this.maxInFlight - this.inFlight;
    if (room <= 0) return null;
    this.claiming = true;
    this.claimWanted = false;
    // Bots this instance alone already fills need no look (an optimisation; the bound is the SQL's).
    const saturated: string[] = [];
    for (const [botId, n] of this.inFlightByBot) if (n >= this.perBot) saturated.push(botId);
    return {
      token: randomBase32(16),
      room,
      saturated,
      candidates: Math.max(MIN_CANDIDATES, room * CANDIDATES_PER_SLOT),
    };
  }

  private endClaim(): void {
    this.claiming = false;
    // A skipped claim is made by the next recording call when a send is still in flight (its result
    // will be recorded); with none in flight only the loop would claim, so wake it. Waking it in
    // every case would make the loop's claims and the recording calls alternate again.
    if (this.claimSkipped) {
      this.claimSkipped = false;
      if (this.inFlight === 0) this.wake();
      else this.claimWanted = true;
    }
  }

  /** Sends what a claim returned (in event order) and ends the claim. */
  private claimed(args: ClaimArgs, rows: ClaimedRow[]): void {
    if (rows.length > 0) {
      this.ctx.logger.trace(
        { deliveries: rows.map((r) => r.id), attempts: rows.map((r) => r.attempts + 1) },
        'webhook deliveries claimed',
      );
    }
    for (const row of rows) this.dispatch(row, args.token);
    this.endClaim();
    // Found work (or had to skip busy bots)? Then more may be due: each batch of finished sends is
    // recorded by a call that claims the next rows too. A round that finds nothing leaves it to
    // NOTIFY (new events, manual retries) and the poll (retries coming due).
    this.moreDue = rows.length > 0 || args.saturated.length > 0;
  }

  private async claimAndDispatch(): Promise<number> {
    const args = this.reserveClaim();
    if (!args) return 0;
    const now = this.ctx.clock.now();
    this.ctx.metrics.webhookRoundTrips.inc({ kind: 'claim' });
    let rows: ClaimedRow[] = [];
    let done = () => {};
    this.claimDone = new Promise<void>((resolve) => {
      done = resolve;
    });
    try {
      rows = await this.ctx.db.query<ClaimedRow>(CLAIM_SQL, [
        new Date(now),
        new Date(now + this.leaseMs),
        args.token,
        this.perBot,
        args.room,
        args.saturated,
        args.candidates,
      ]);
    } finally {
      this.claimed(args, rows);
      this.claimDone = undefined;
      done();
    }
    return rows.length;
  }

  private dispatch(row: ClaimedRow, token: string): void {
    this.inFlight++;
    this.inFlightByBot.set(row.bot_id, (this.inFlightByBot.get(row.bot_id) ?? 0) + 1);
    // One promise per send besides the sender's own: its result is handled by a plain callback.
    this.attempt(row).then(
      (result) => this.attempted(row, token, result),
      (error) => this.attempted(row, token, this.unprepared(row, error)),
    );
  }

  /** A send's result: recorded with the next batch, unless the delivery waits for its tunnel. */
  private attempted(row: ClaimedRow, token: string, result: AttemptResult): void | Promise<void> {
    // No tunnel client has ever connected for the bot: the delivery waits for it (tunnelWait.ts).
    if (result.tunnelNotConnected) {
      return this.parked(row, token).then((parked) => this.finish(row, token, parked ? null : result));
    }
    this.finish(row, token, result);
  }

  /** Ends a send: its result (null when parked) waits to be recorded, and its slot is given back. */
  private finish(row: ClaimedRow, token: string, result: AttemptResult | null): void {
    try {
      if (result) {
        this.finished.push({ id: row.id, token, botId: row.bot_id, result });
        const outcome = result.ok
          ? 'delivered'
          : result.error?.startsWith(REFUSED_PREFIX)
            ? 'refused'
            : 'failed_attempt';
        this.ctx.metrics.deliveryAttempts.inc({ result: outcome });
      }
    } finally {
      this.inFlight--;
      const n = (this.inFlightByBot.get(row.bot_id) ?? 1) - 1;
      if (n <= 0) this.inFlightByBot.delete(row.bot_id);
      else this.inFlightByBot.set(row.bot_id, n);
      if (this.inFlight === 0) {
        const waiters = this.sendsDone;
        this.sendsDone = [];
        for (const fn of waiters) fn();
      }
      // The flush's recording call also claims the next rows (slots given back are taken again).
      if (!this.stopped) void this.flush();
    }
  }

  /** The result of an attempt that could not be prepared (or whose send failed unexpectedly). */
  private unprepared(row: ClaimedRow, error: unknown): AttemptResult {
    this.ctx.logger.warn({ err: error, delivery_id: row.id }, 'webhook attempt could not be prepared');
    return {
      ok: false,
      status: null,
      excerpt: null,
      error: 'internal error preparing the delivery',
      durationMs: 0,
      via: '',
    };
  }

  /** Sends a claimed row; never throws (a failure to prepare it is a rejected promise). */
  private attempt(row: ClaimedRow): Promise<AttemptResult> {
    try {
      const body = Buffer.from(row.body, 'utf8');
      const secrets = {
        current: this.decrypt(row.webhook_secret_enc),
        previous: row.webhook_secret_prev_enc ? this.decrypt(row.webhook_secret_prev_enc) : null,
      };
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'user-agent': USER_AGENT,
        'x-service-event': row.event_type,
        'x-service-event-id': row.event_id,
        'x-service-delivery-id': row.id,
      };
      signatureHeaders(secrets, row.event_id, Math.floor(this.ctx.clock.now() / 1000), body, headers);
      let target: DeliveryTarget;
      if (row.callback_url) {
        target = { kind: 'callback', url: row.callback_url };
      } else if (row.tunnel_hostname && row.webhook_path) {
        target = { kind: 'tunnel', hostname: row.tunnel_hostname, path: row.webhook_path };
        // Primary bots' gateways check this bearer token; other bots get none.
        if (row.hooks_token_enc) headers.authorization = `Bearer ${this.decrypt(row.hooks_token_enc)}`;
      } else {
        return Promise.resolve({
          ok: false,
          status: null,
          excerpt: null,
          error: 'bot has no webhook target',
          durationMs: 0,
          via: '',
        });
      }
      return this.sender.send(target, body, headers);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Parks a delivery until the bot's tunnel client first connects; false when it cannot (tunnelWait.ts). */
  private async parked(row: ClaimedRow, token: string): Promise<boolean> {
    try {
      const parked = await parkUntilTunnel(this.ctx.db, row.id, token, row.bot_id);
      if (parked) {
        this.ctx.metrics.deliveryAttempts.inc({ result: 'waiting_for_tunnel' });
        this.ctx.logger.debug(
          { delivery_id: row.id, bot_id: row.bot_id },
          "webhook delivery waits for the bot's tunnel client",
        );
      }
      return parked;
    } catch (error) {
      this.ctx.logger.warn({ err: error, delivery_id: row.id }, 'parking a delivery for its tunnel failed');
      return false;
    }
  }

  /**
   * Decrypts a bot's webhook secret or hooks token, remembering the result by its ciphertext: a
   * bot's secret is decrypted once, not on every attempt (a rotated secret has a new ciphertext).
   */
  private readonly decrypt = memoize(PLAINTEXTS_MAX, (ciphertext) => this.ctx.secrets.decrypt(ciphertext));

  /**
   * Whether to record now what has finished: when at least as many results wait as sends are still
   * out (the sends of one claim finish close together), when a claim waits for this call (new
   * events arrived during another claim: claimWanted), when the worker stops, or (`force`) when
   * the results have waited RECORD_WAIT_MS. Not at once for the first few results of many: a
   * recording call (which also claims) for one result cost a round trip while the rest of its claim
   * finished and waited for it (one call in six in the bench, 2026-12-02).
   */
  private recordNow(force: boolean): boolean {
    return force || this.stopped || this.claimWanted || this.finished.length >= this.inFlight;
  }

  /**
   * Records every finished attempt; concurrent callers share the flush in progress. A few results
   * with many sends still out wait for more, at most RECORD_WAIT_MS (recordNow).
   */
  private flush(force = false): Promise<void> {
    if (this.flushing) return this.flushing;
    if (this.finished.length === 0) return Promise.resolve();
    if (!this.recordNow(force)) {
      this.recordTimer ??= setTimeout(() => {
        this.recordTimer = undefined;
        void this.flush(true);
      }, RECORD_WAIT_MS);
      return Promise.resolve();
    }
    if (this.recordTimer) {
      clearTimeout(this.recordTimer);
      this.recordTimer = undefined;
    }
    const run = async () => {
      let first = true;
      while (this.finished.length > 0 && (first || this.recordNow(false))) {
        first = false;
        const batch = this.finished;
        this.finished = [];
        try {
          const claimed = await this.record(batch);
          // Recorded attempts gave their leases back: bots held at their bound have room again. The
          // recording call took them, unless another claim was under way or there was no free slot;
          // then the next recording call claims, or the loop when no send is left to be recorded.
          if (!claimed && this.moreDue && !this.stopped && this.inFlight === 0) this.wake();
        } catch (error) {
          // Keep them: a later flush retries. If the lease expires first, another worker resends
          // (at least once) and this late result is then ignored by the token check.
          this.ctx.logger.warn({ err: error, count: batch.length }, 'recording webhook attempts failed');
          this.finished = batch.concat(this.finished);
          if (this.stopped) return;
          await new Promise((r) => setTimeout(r, 500));
        }
      }
    };
    const flushing = run().finally(() => {
      this.flushing = undefined;
      // Results that arrived while the last batch was being written (recordNow decides when).
      if (this.finished.length > 0 && !this.stopped) void this.flush();
    });
    this.flushing = flushing;
    return flushing;
  }

  /** Waits until every finished attempt is recorded (or recording failed while stopped). */
  private async drain(): Promise<void> {
    while (this.inFlight > 0) await new Promise<void>((resolve) => this.sendsDone.push(resolve));
    for (let i = 0; i < 100 && (this.flushing || this.finished.length > 0); i++) await this.flush(true);
  }

  /**
   * Records a batch in one round trip; while more is due (and the worker runs), the same call claims
   * the next rows and sends them. Returns whether it claimed.
   */
  private async record(batch: Finished[]): Promise<boolean> {
    const now = this.ctx.clock.now();
    // Health counts every attempt that really reached out, including a late one whose lease was
    // taken over (its delivery row is left to the new holder).
    const changes = summarise(batch.map((f) => ({ botId: f.botId, ok: f.result.ok })));
    // A claim of the loop under way: wait for it, so that this call can claim (the slots it frees
    // are handed on in the same round trip) instead of leaving them to another claim.
    if (this.claimDone) await this.claimDone;
    const claim = (this.moreDue || this.claimWanted) && !this.stopped ? this.reserveClaim() : null;
    this.ctx.metrics.webhookRoundTrips.inc({ kind: 'record' });
    let rows: ClaimedRow[];
    try {
      rows = await this.ctx.db.write<ClaimedRow>(
        RECORD_SQL,
        recordCall.params({
          batch,
          changes,
          now,
          claim,
          retryDelays: this.ctx.config.webhookRetryDelaysSeconds,
          leaseMs: this.leaseMs,
          perBot: this.perBot,
        }),
      );
    } catch (error) {
      if (claim) this.endClaim();
      throw error;
    }
    if (claim) this.claimed(claim, rows);
    // Each attempt: a failure at info, a delivery at debug (what the attempt decided; no header,
    // body or signature is logged).
    for (const f of batch) {
      const fields = {
        delivery_id: f.id,
        bot_id: f.botId,
        status: f.result.status,
        duration_ms: f.result.durationMs,
        target: f.result.via,
      };
      if (!f.result.ok) this.ctx.logger.info({ ...fields, error: f.result.error }, 'webhook attempt failed');
      else this.ctx.logger.debug(fields, 'webhook delivered');
    }
    return claim !== null;
  }
}
