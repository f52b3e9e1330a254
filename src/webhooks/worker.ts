import { tunnelWebhookUrl } from '../bots/tunnelSetup.ts';
import { EVENTS_CHANNEL } from '../events/outbox.ts';
import type { AppContext } from '../platform/context.ts';
import { randomBase32 } from '../platform/ids.ts';
import { applyHealthCtes, summarise } from './health.ts';
import {
  type AttemptResult,
  createWebhookSender,
  type DeliveryTarget,
  signatureHeaders,
  USER_AGENT,
  type WebhookSender,
} from './sender.ts';
import { REFUSED_PREFIX, type Resolver } from './ssrf.ts';

// The delivery worker. Each round claims due deliveries (FOR UPDATE SKIP LOCKED, then a lease:
// locked_until + lock_token) within two bounds: PER_BOT_IN_FLIGHT per bot across the whole
// deployment, so one slow or dead endpoint holds at most that many slots whatever the number of
// instances (a bot's in-flight count is its rows under a live lease, read inside the claim, and
// claims are serialised by a transaction-scoped advisory lock so that two instances cannot both
// take the last slot), and MAX_IN_FLIGHT in all per instance. A claim is one round trip (the SQL
// function webhook_claim, src/migrations/functions/) and returns its rows oldest first. Sends run concurrently; their
// results are recorded in batches (one statement per batch: the deliveries, every attempt in
// webhook_attempts, events.delivered_at and the bots' health). It wakes on NOTIFY botpay_events
// (sent after commit by the events_wake trigger, 0001), when a send finishes, when a batch is
// recorded (leases given back), and on a safety poll for retries that come due.
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

// One statement (atomic on its own, one round trip) records a batch: the deliveries, each attempt
// in webhook_attempts, the events' delivered_at and the bots' health. $10: retry delays in seconds. After the n-th failed attempt (d.attempts = n - 1 before it) the next
// one is due delays[n] later; past the end of the list the delivery is failed.
const RECORD_SQL = `
WITH v AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::boolean[], $4::int[], $5::text[], $6::text[], $7::int[], $8::text[])
         WITH ORDINALITY AS v(id, token, ok, response_status, excerpt, error, duration_ms, via, ord)
), upd AS (
  UPDATE webhook_deliveries d
     SET attempts = d.attempts + 1,
         last_attempt_at = $9,
         response_status = v.response_status,
         response_excerpt = v.excerpt,
         error = v.error,
         duration_ms = v.duration_ms,
         target = v.via,
         locked_until = NULL,
         lock_token = NULL,
         delivered_at = CASE WHEN v.ok THEN $9 ELSE d.delivered_at END,
         status = CASE
           WHEN v.ok THEN 'delivered'
           WHEN d.status <> 'pending' THEN d.status
           WHEN ($10::int[])[d.attempts + 1] IS NULL THEN 'failed'
           ELSE 'pending' END,
         next_attempt_at = CASE
           WHEN v.ok OR ($10::int[])[d.attempts + 1] IS NULL THEN d.next_attempt_at
           ELSE $9 + make_interval(secs => ($10::int[])[d.attempts + 1]) END
    FROM v
   WHERE d.id = v.id AND d.lock_token = v.token
  RETURNING d.id, d.attempts, d.event_id, d.bot_id, v.ok, v.ord, v.response_status, v.excerpt, v.error,
            v.duration_ms, v.via
), att AS (
  INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, ok, response_status, response_excerpt,
                                error, duration_ms, target)
  SELECT upd.id, upd.attempts, $9, upd.ok, upd.response_status, upd.excerpt, upd.error, upd.duration_ms, upd.via
    FROM upd
), ev AS (
  UPDATE events e SET delivered_at = $9
    FROM upd WHERE e.id = upd.event_id AND upd.ok AND e.delivered_at IS NULL
), ${applyHealthCtes('$11', '$12', '$13')}
SELECT count(*)::int AS recorded FROM upd`;

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
  private readonly plaintexts = new Map<string, string>();
  private readonly sends = new Set<Promise<void>>();
  private finished: Finished[] = [];
  private flushing: Promise<void> | undefined;
  private inFlight = 0;
  private stopped = true;
  private wakeRequested = false;
  private moreDue = false;
  private lastRound = 0;
  private wakeUp: (() => void) | undefined;
  private loopDone: Promise<void> | undefined;
  private unlisten: (() => Promise<void>) | undefined;

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
    this.unlisten = await this.ctx.db.listen(EVENTS_CHANNEL, () => this.wake());
    this.loopDone = this.loop();
  }

  /** Stops claiming, lets in-flight attempts finish and records them. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wake();
    await this.loopDone;
    await this.unlisten?.();
    await this.drain();
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

  private async claimAndDispatch(): Promise<number> {
    const room = this.maxInFlight - this.inFlight;
    if (room <= 0) return 0;
    const now = this.ctx.clock.now();
    const token = randomBase32(16);
    // Bots this instance alone already fills need no look (an optimisation; the bound is the SQL's).
    const saturated: string[] = [];
    for (const [botId, n] of this.inFlightByBot) if (n >= this.perBot) saturated.push(botId);
    this.ctx.metrics.webhookRoundTrips.inc({ kind: 'claim' });
    const rows = await this.ctx.db.query<ClaimedRow>(CLAIM_SQL, [
      new Date(now),
      new Date(now + this.leaseMs),
      token,
      this.perBot,
      room,
      saturated,
      Math.max(MIN_CANDIDATES, room * CANDIDATES_PER_SLOT),
    ]);
    for (const row of rows) this.dispatch(row, token);
    // Found work (or had to skip busy bots)? Then more may be due: finishing sends start the next
    // round, once half of this round is done so that rounds stay large. A round that finds nothing
    // leaves it to NOTIFY (new events, manual retries) and the poll (retries coming due).
    this.moreDue = rows.length > 0 || saturated.length > 0;
    this.lastRound = rows.length;
    return rows.length;
  }

  private dispatch(row: ClaimedRow, token: string): void {
    this.inFlight++;
    this.inFlightByBot.set(row.bot_id, (this.inFlightByBot.get(row.bot_id) ?? 0) + 1);
    const send = this.attempt(row)
      .then((result) => {
        this.finished.push({ id: row.id, token, botId: row.bot_id, result });
        const outcome = result.ok
          ? 'delivered'
          : result.error?.startsWith(REFUSED_PREFIX)
            ? 'refused'
            : 'failed_attempt';
        this.ctx.metrics.deliveryAttempts.inc({ result: outcome });
      })
      .finally(() => {
        this.inFlight--;
        const n = (this.inFlightByBot.get(row.bot_id) ?? 1) - 1;
        if (n <= 0) this.inFlightByBot.delete(row.bot_id);
        else this.inFlightByBot.set(row.bot_id, n);
        this.sends.delete(send);
        if (!this.stopped) {
          void this.flush();
          if (this.moreDue && this.inFlight <= this.lastRound / 2) this.wake();
        }
      });
    this.sends.add(send);
  }

  private async attempt(row: ClaimedRow): Promise<AttemptResult> {
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
        ...signatureHeaders(secrets, row.event_id, Math.floor(this.ctx.clock.now() / 1000), body),
      };
      let target: DeliveryTarget;
      if (row.callback_url) {
        target = { kind: 'callback', url: row.callback_url };
      } else if (row.tunnel_hostname && row.webhook_path) {
        target = {
          kind: 'tunnel',
          hostname: row.tunnel_hostname,
          path: row.webhook_path,
          publicUrl: tunnelWebhookUrl(this.ctx.config.baseUrl, row.tunnel_hostname, row.webhook_path),
        };
        // Primary bots' gateways check this bearer token; other bots get none.
        if (row.hooks_token_enc) headers.authorization = `Bearer ${this.decrypt(row.hooks_token_enc)}`;
      } else {
        return {
          ok: false,
          status: null,
          excerpt: null,
          error: 'bot has no webhook target',
          durationMs: 0,
          via: '',
        };
      }
      return await this.sender.send(target, body, headers);
    } catch (error) {
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
  }

  /**
   * Decrypts a bot's webhook secret or hooks token, remembering the result by its ciphertext: a
   * bot's secret is decrypted once, not on every attempt (a rotated secret has a new ciphertext).
   */
  private decrypt(ciphertext: string): string {
    let plain = this.plaintexts.get(ciphertext);
    if (plain === undefined) {
      plain = this.ctx.secrets.decrypt(ciphertext);
      if (this.plaintexts.size >= PLAINTEXTS_MAX) this.plaintexts.clear();
      this.plaintexts.set(ciphertext, plain);
    }
    return plain;
  }

  /** Records every finished attempt; concurrent callers share the flush in progress. */
  private flush(): Promise<void> {
    if (this.flushing) return this.flushing;
    if (this.finished.length === 0) return Promise.resolve();
    const run = async () => {
      while (this.finished.length > 0) {
        const batch = this.finished;
        this.finished = [];
        try {
          await this.record(batch);
          // Recorded attempts gave their leases back: bots held at their bound have room again.
          if (this.moreDue && !this.stopped) this.wake();
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
      // Results that arrived while the last batch was being written.
      if (this.finished.length > 0 && !this.stopped) void this.flush();
    });
    this.flushing = flushing;
    return flushing;
  }

  /** Waits until every finished attempt is recorded (or recording failed while stopped). */
  private async drain(): Promise<void> {
    while (this.sends.size > 0) await Promise.all([...this.sends]);
    for (let i = 0; i < 100 && (this.flushing || this.finished.length > 0); i++) await this.flush();
  }

  private async record(batch: Finished[]): Promise<void> {
    const now = new Date(this.ctx.clock.now());
    // Health counts every attempt that really reached out, including a late one whose lease was
    // taken over (its delivery row is left to the new holder).
    const changes = summarise(batch.map((f) => ({ botId: f.botId, ok: f.result.ok })));
    this.ctx.metrics.webhookRoundTrips.inc({ kind: 'record' });
    await this.ctx.db.query(RECORD_SQL, [
      batch.map((f) => f.id),
      batch.map((f) => f.token),
      batch.map((f) => f.result.ok),
      batch.map((f) => f.result.status),
      batch.map((f) => f.result.excerpt),
      batch.map((f) => f.result.error),
      batch.map((f) => f.result.durationMs),
      batch.map((f) => f.result.via),
      now,
      this.ctx.config.webhookRetryDelaysSeconds,
      changes.map((c) => c.botId),
      changes.map((c) => c.reset),
      changes.map((c) => c.failures),
    ]);
    for (const f of batch) {
      if (!f.result.ok) {
        this.ctx.logger.info(
          { delivery_id: f.id, bot_id: f.botId, status: f.result.status, error: f.result.error },
          'webhook attempt failed',
        );
      }
    }
  }
}
