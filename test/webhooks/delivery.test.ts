import type { ServerResponse } from 'node:http';
import { verify } from '@octokit/webhooks-methods';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { until } from '../support/wait.ts';
import { deliveryOf, emit, healthOf, Receiver } from './helpers.ts';

describe('webhook delivery', () => {
  let svc: TestService;
  let receiver: Receiver;
  let worker: DeliveryWorker;

  beforeAll(async () => {
    svc = await createTestService({ env: { WEBHOOK_TIMEOUT_MS: '1000' } });
    receiver = await new Receiver().start();
    worker = new DeliveryWorker(svc.ctx);
  });
  afterEach(() => {
    receiver.respond = (_req, res) => {
      res.writeHead(200);
      res.end('ok');
    };
  });
  afterAll(async () => {
    await worker.stop();
    await receiver.close();
    await svc.close();
  });

  /**
   * Never-answered requests open at once at the receiver (`max`: the peak). A request is counted a
   * moment after it arrives: the worker closes a timed-out connection before it records the
   * attempt and claims the next one, but the receiver may read the new request before the old
   * socket's close, which would count one request too many for an instant.
   */
  function openCounter() {
    const counter = {
      open: 0,
      max: 0,
      count(res: ServerResponse) {
        setTimeout(() => {
          if (res.destroyed || res.writableEnded) return;
          counter.open++;
          counter.max = Math.max(counter.max, counter.open);
          res.on('close', () => counter.open--);
        }, 50);
      },
    };
    return counter;
  }

  async function botWithReceiver(path = '/hook') {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: receiver.url(path) } });
    await worker.runOnce(); // the wallet.activated event of the claim
    return { owner, bot };
  }

  it('signs the exact body; an independent implementation verifies it; headers as documented', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: receiver.url('/signed') } });
    const fund = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 1234 },
    });
    expect(fund.statusCode).toBe(200);
    const before = receiver.requests.length;
    expect(await worker.runOnce()).toBe(2);
    const got = receiver.requests.slice(before).filter((r) => r.url === '/signed');
    expect(got.map((r) => r.headers['x-service-event']).sort()).toEqual([
      'wallet.activated',
      'wallet.funded',
    ]);
    for (const r of got) {
      const signature = r.headers['x-service-signature'] as string;
      expect(signature).toMatch(/^sha256=[0-9a-f]{64}$/);
      expect(await verify(bot.webhook_secret, r.body, signature)).toBe(true);
      expect(await verify('whsec_wrong', r.body, signature)).toBe(false);
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.headers.authorization).toBeUndefined(); // not a primary tunnel bot
      const body = JSON.parse(r.body);
      expect(Object.keys(body)).toEqual(['id', 'event', 'timestamp', 'bot_id', 'data']);
      expect(r.headers['x-service-event-id']).toBe(body.id);
      expect(body.bot_id).toBe(bot.bot_id);
      expect(body.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      // exactly the outbox bytes
      const [stored] = await svc.ctx.db.query<{ body: string }>('SELECT body FROM events WHERE id = $1', [
        body.id,
      ]);
      expect(r.body).toBe(stored!.body);
      const d = await deliveryOf(svc, body.id);
      expect(d).toMatchObject({
        status: 'delivered',
        attempts: 1,
        response_status: 200,
        response_excerpt: 'ok',
      });
    }
    const funded = got.find((r) => r.headers['x-service-event'] === 'wallet.funded')!;
    expect(JSON.parse(funded.body).data).toMatchObject({ amount: 12.34 });
    const status = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    expect(status.json()).toMatchObject({
      pending_messages: 0,
      webhook_status: 'active',
      webhook_fail_count: 0,
    });
    // Nothing is sent twice.
    expect(await worker.runOnce()).toBe(0);
  });

  it('retries after 1, 5, 15, 60 and 360 minutes with the same bytes, then fails (fake clock)', async () => {
    const { bot } = await botWithReceiver('/flaky');
    receiver.respond = (_req, res) => {
      res.writeHead(500);
      res.end('x'.repeat(5000));
    };
    const { id } = await emit(svc, bot.bot_id);
    const seen = () => receiver.requests.filter((r) => r.url === '/flaky' && r.body.includes(id));
    expect(await worker.runOnce()).toBe(1);
    let d = await deliveryOf(svc, id);
    expect(d).toMatchObject({ status: 'pending', attempts: 1, response_status: 500, error: 'HTTP 500' });
    expect(d.response_excerpt!.length).toBe(1024);
    const delays = [60, 300, 900, 3600, 21600];
    for (const [i, delay] of delays.entries()) {
      expect(new Date(d.next_attempt_at).getTime() - svc.clock.now()).toBe(delay * 1000);
      svc.clock.advance(delay * 1000 - 1000);
      expect(await worker.runOnce()).toBe(0); // not due yet
      svc.clock.advance(1000);
      expect(await worker.runOnce()).toBe(1);
      d = await deliveryOf(svc, id);
      expect(d.attempts).toBe(i + 2);
    }
    expect(d.status).toBe('failed');
    svc.clock.advance(7 * 86400_000);
    expect(await worker.runOnce()).toBe(0);
    const bodies = new Set(seen().map((r) => r.body));
    const signatures = new Set(seen().map((r) => r.headers['x-service-signature']));
    expect(seen()).toHaveLength(6);
    expect(bodies.size).toBe(1);
    expect(signatures.size).toBe(1);
    // Still readable by the bot.
    const messages = await svc.app.inject({ url: '/api/v1/bot/messages', headers: bot.auth });
    expect(messages.json().messages.map((m: { id: string }) => m.id)).toContain(id);
  });

  it('a response slower than WEBHOOK_TIMEOUT_MS is a failure', async () => {
    const { bot } = await botWithReceiver('/slow');
    receiver.respond = (_req, res) => {
      setTimeout(() => {
        res.writeHead(200);
        res.end('too late');
      }, 3000);
    };
    const { id } = await emit(svc, bot.bot_id);
    const started = Date.now();
    await worker.runOnce();
    expect(Date.now() - started).toBeLessThan(2500);
    expect(await deliveryOf(svc, id)).toMatchObject({
      status: 'pending',
      attempts: 1,
      response_status: null,
      error: 'timeout after 1000 ms',
    });
  });

  it('a body dripped slower than the deadline is cut at WEBHOOK_TIMEOUT_MS (a hard deadline, not per chunk)', async () => {
    const { bot } = await botWithReceiver('/drip');
    const timers: NodeJS.Timeout[] = [];
    receiver.respond = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      // One byte every 300 ms: each gap is inside the timeout, the whole answer is not.
      const tick = () => {
        if (res.destroyed) return;
        res.write('x');
        timers.push(setTimeout(tick, 300));
      };
      tick();
    };
    const { id } = await emit(svc, bot.bot_id);
    const started = Date.now();
    await worker.runOnce();
    for (const t of timers) clearTimeout(t);
    expect(Date.now() - started).toBeLessThan(2500);
    expect(await deliveryOf(svc, id)).toMatchObject({
      status: 'pending',
      attempts: 1,
      error: 'timeout after 1000 ms',
    });
  });

  it('does not follow redirects', async () => {
    const { bot } = await botWithReceiver('/moved');
    receiver.respond = (_req, res) => {
      res.writeHead(302, { location: receiver.url('/elsewhere') });
      res.end();
    };
    const { id } = await emit(svc, bot.bot_id);
    await worker.runOnce();
    expect(await deliveryOf(svc, id)).toMatchObject({
      status: 'pending',
      response_status: 302,
      error: 'HTTP 302',
    });
    expect(receiver.requests.some((r) => r.url === '/elsewhere')).toBe(false);
  });

  it('an answer that comes in several pieces is kept whole in the excerpt', async () => {
    const { bot } = await botWithReceiver('/pieces');
    receiver.respond = (_req, res) => {
      res.writeHead(503, { 'content-type': 'text/plain' });
      res.write('busy, ');
      setTimeout(() => res.end('try later'), 50);
    };
    const { id } = await emit(svc, bot.bot_id);
    expect(await worker.runOnce()).toBe(1);
    expect(await deliveryOf(svc, id)).toMatchObject({
      status: 'pending',
      attempts: 1,
      response_status: 503,
      response_excerpt: 'busy, try later',
      error: 'HTTP 503',
    });
  });

  it('a NUL byte in the answer is kept as U+FFFD (PostgreSQL text cannot hold NUL)', async () => {
    const { bot } = await botWithReceiver('/nul');
    receiver.respond = (_req, res) => {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(Buffer.from('bad\u0000byte'));
    };
    const { id } = await emit(svc, bot.bot_id);
    expect(await worker.runOnce()).toBe(1);
    expect(await deliveryOf(svc, id)).toMatchObject({
      response_status: 500,
      response_excerpt: 'bad\uFFFDbyte',
      error: 'HTTP 500',
    });
  });

  it('an attempt that cannot be prepared is a recorded failure, sends nothing and frees its slot', async () => {
    const { bot } = await botWithReceiver('/unprepared');
    await svc.ctx.db.query(`UPDATE bots SET webhook_secret_enc = 'v1.AAAA.AAAA.AAAA' WHERE id = $1`, [
      bot.bot_id,
    ]);
    const { id } = await emit(svc, bot.bot_id);
    const before = receiver.requests.length;
    expect(await worker.runOnce()).toBe(1);
    expect(receiver.requests.slice(before).some((r) => r.url === '/unprepared')).toBe(false);
    expect(await deliveryOf(svc, id)).toMatchObject({
      status: 'pending',
      attempts: 1,
      response_status: null,
      error: 'internal error preparing the delivery',
    });
    // Its slot was given back: the next round claims and runs to its end.
    expect(await worker.runOnce()).toBe(0);
  });

  it('a refused connection is a recorded failure', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: 'http://127.0.0.1:9/nothing' } });
    await worker.runOnce();
    const [row] = await svc.ctx.db.query<{ id: string }>('SELECT id FROM events WHERE bot_id = $1', [
      bot.bot_id,
    ]);
    expect(await deliveryOf(svc, row!.id)).toMatchObject({ status: 'pending', error: 'connection refused' });
  });

  it('two workers share the queue without sending any attempt twice', async () => {
    const { bot } = await botWithReceiver('/shared');
    const ids = new Set<string>();
    for (let i = 0; i < 30; i++) ids.add((await emit(svc, bot.bot_id)).id);
    const other = new DeliveryWorker(svc.ctx);
    try {
      for (let round = 0; round < 10; round++) await Promise.all([worker.runOnce(), other.runOnce()]);
    } finally {
      await other.stop();
    }
    const got = receiver.requests
      .filter((r) => r.url === '/shared' && r.headers['x-service-event'] === 'wallet.funded')
      .map((r) => JSON.parse(r.body).id);
    expect(got.length).toBe(30);
    expect(new Set(got)).toEqual(ids);
  });

  it('recording a batch frees its slots and the same call claims the next rows, oldest first', async () => {
    const { bot } = await botWithReceiver('/record-claim');
    const events = [];
    for (let i = 0; i < 4; i++) {
      events.push(await emit(svc, bot.bot_id));
      svc.clock.advance(1_000);
    }
    const [e0, e1, e2, e3] = events.map((e) => e.id);
    const now = new Date(svc.clock.now());
    const until = new Date(svc.clock.now() + 60_000);
    // Other tests' bots are skipped (p_skip), so only this bot's rows are looked at.
    const others = (
      await svc.ctx.db.query<{ id: string }>('SELECT id FROM bots WHERE id <> $1', [bot.bot_id])
    ).map((r) => r.id);
    // One slot per bot: the claim takes the oldest only.
    const first = await svc.ctx.db.query<{ id: string; event_id: string }>(
      'SELECT * FROM webhook_claim($1, $2, $3, 1, 10, $4, 100)',
      [now, until, 'tok-a', others],
    );
    expect(first.map((r) => r.event_id)).toEqual([e0]);
    const recordAndClaim = (id: string, token: string, ok: boolean, room: number, claimToken: string) =>
      svc.ctx.db.query<{ id: string; event_id: string }>(
        `SELECT * FROM webhook_record_and_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 3, 6,
                                                $14, $15, 1, $16, $17, 100)`,
        [
          [id],
          [token],
          [ok],
          [ok ? 200 : 500],
          ['ok'],
          [ok ? null : 'HTTP 500'],
          [5],
          ['http://x/record-claim'],
          now,
          [60],
          [bot.bot_id],
          [ok],
          [ok ? 0 : 1],
          until,
          claimToken,
          room,
          others,
        ],
      );
    // A result under another token is not recorded, and the slot stays taken: nothing is claimed.
    const id0 = first[0]?.id ?? '';
    expect(await recordAndClaim(id0, 'not-the-token', true, 10, 'tok-x')).toEqual([]);
    expect((await deliveryOf(svc, e0 ?? '')).status).toBe('pending');
    // The real result frees the slot and the same call takes the next delivery of the bot.
    const second = await recordAndClaim(id0, 'tok-a', true, 10, 'tok-b');
    expect(second.map((r) => r.event_id)).toEqual([e1]);
    const d0 = await deliveryOf(svc, e0 ?? '');
    expect([d0.status, d0.attempts, d0.response_status]).toEqual(['delivered', 1, 200]);
    const attempts = await svc.ctx.db.query<{ attempt: number; ok: boolean }>(
      'SELECT attempt, ok FROM webhook_attempts WHERE delivery_id = $1',
      [id0],
    );
    expect(attempts).toEqual([{ attempt: 1, ok: true }]);
    // A failure is scheduled for its retry and, with no room, nothing is claimed (no lock taken).
    const id1 = second[0]?.id ?? '';
    expect(await recordAndClaim(id1, 'tok-b', false, 0, '')).toEqual([]);
    const d1 = await deliveryOf(svc, e1 ?? '');
    expect([d1.status, d1.attempts]).toEqual(['pending', 1]);
    expect(d1.next_attempt_at.getTime()).toBe(now.getTime() + 60_000);
    expect((await healthOf(svc, bot.bot_id)).webhook_fail_count).toBe(1);
    // The slot is free again: the next claim takes e2 (e1 waits for its retry), then e3 after it.
    const third = await svc.ctx.db.query<{ event_id: string }>(
      'SELECT * FROM webhook_claim($1, $2, $3, 1, 10, $4, 100)',
      [now, until, 'tok-c', others],
    );
    expect(third.map((r) => r.event_id)).toEqual([e2]);
    expect(e3).toBeDefined();
    // Leave the queue empty for the tests after this one.
    await svc.ctx.db.query(
      "UPDATE webhook_deliveries SET status = 'delivered', locked_until = NULL, lock_token = NULL WHERE bot_id = $1",
      [bot.bot_id],
    );
  });

  it('a running worker claims in the recording round trip: one bot at one slot, sent in order', async () => {
    const { bot } = await botWithReceiver('/chained');
    const ids: string[] = [];
    // The worker's database, counting the rows that claims of their own (not recording calls) took.
    let claimedAlone = 0;
    let recordingCalls = 0;
    const db = new Proxy(svc.ctx.db, {
      get(target, prop) {
        // The recording call goes through write (it announces to the status caches), the claim
        // through query.
        if (prop === 'query' || prop === 'write') {
          return async (sql: string, params?: readonly unknown[]) => {
            const rows = await target[prop](sql, params);
            if (sql.includes('webhook_record_and_claim(')) recordingCalls++;
            else if (sql.includes('webhook_claim(')) claimedAlone += rows.length;
            return rows;
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const live = new DeliveryWorker({ ...svc.ctx, db }, { pollMs: 60_000, perBotInFlight: 1 });
    try {
      // Committed before the worker starts: its first claim finds a backlog of eight. (A NOTIFY that
      // arrives later wakes a claim that finds the bot's one slot taken.)
      for (let i = 0; i < 8; i++) {
        ids.push((await emit(svc, bot.bot_id)).id);
        svc.clock.advance(1); // distinct due times (equal ones: test/webhooks/order.test.ts)
      }
      await live.start();
      await receiver.waitFor(
        (rs) =>
          rs.filter((r) => r.url === '/chained' && r.headers['x-service-event'] === 'wallet.funded').length >=
          8,
        10_000,
      );
    } finally {
      await live.stop();
    }
    const got = receiver.requests
      .filter((r) => r.url === '/chained' && r.headers['x-service-event'] === 'wallet.funded')
      .map((r) => JSON.parse(r.body).id);
    expect(got).toEqual(ids); // one at a time, oldest first
    // The first delivery came from a claim of its own; each later one was claimed by the call that
    // recorded the one before (without that, each would cost a claim round trip of its own).
    expect(claimedAlone).toBe(1);
    expect(recordingCalls).toBeGreaterThanOrEqual(8);
  });

  it('wakes on commit (NOTIFY) without waiting for the poll', async () => {
    const { bot } = await botWithReceiver('/wake');
    const live = new DeliveryWorker(svc.ctx, { pollMs: 60_000 });
    await live.start();
    try {
      await new Promise((r) => setTimeout(r, 100)); // first (empty) round done; now sleeping
      const started = Date.now();
      const { id } = await emit(svc, bot.bot_id);
      await receiver.waitFor((rs) => rs.some((r) => r.body.includes(id)), 5_000);
      expect(Date.now() - started).toBeLessThan(1_000);
    } finally {
      await live.stop();
    }
  });

  it('a slow endpoint does not delay deliveries to other bots', async () => {
    const slow = await botWithReceiver('/stuck');
    const fast = await botWithReceiver('/fast');
    const stuck = openCounter();
    receiver.respond = (req, res) => {
      if (req.url === '/stuck') {
        stuck.count(res);
        return;
      }
      res.writeHead(200);
      res.end('ok');
    };
    // Ten slots in all, four per bot: without the per-bot bound the stuck bot would take all ten.
    const live = new DeliveryWorker(svc.ctx, { pollMs: 60_000, maxInFlight: 10, perBotInFlight: 4 });
    await live.start();
    try {
      for (let i = 0; i < 40; i++) await emit(svc, slow.bot.bot_id);
      const started = Date.now();
      const { id } = await emit(svc, fast.bot.bot_id);
      await receiver.waitFor((rs) => rs.some((r) => r.url === '/fast' && r.body.includes(id)), 5_000);
      expect(Date.now() - started).toBeLessThan(900); // inside the stuck endpoint's 1000 ms timeout
      await receiver.waitFor((rs) => rs.filter((r) => r.url === '/stuck').length >= 8, 5_000);
      expect(stuck.max).toBe(4); // per-bot bound, and it is used
    } finally {
      await live.stop();
    }
  });

  it('the per-bot bound holds across instances: two workers never have more than the bound open for one bot', async () => {
    const slow = await botWithReceiver('/stuck2');
    const stuck = openCounter();
    receiver.respond = (req, res) => {
      if (req.url === '/stuck2') {
        stuck.count(res);
        return;
      }
      res.writeHead(200);
      res.end('ok');
    };
    // Two instances' workers on one database, each allowed 4 per bot and 10 in all.
    const a = new DeliveryWorker(svc.ctx, { pollMs: 50, maxInFlight: 10, perBotInFlight: 4 });
    const b = new DeliveryWorker(svc.ctx, { pollMs: 50, maxInFlight: 10, perBotInFlight: 4 });
    await Promise.all([a.start(), b.start()]);
    try {
      for (let i = 0; i < 40; i++) await emit(svc, slow.bot.bot_id);
      await receiver.waitFor((rs) => rs.filter((r) => r.url === '/stuck2').length >= 8, 8_000);
      // The counter counts a request 50 ms after it arrived: on a busy machine the last ones may
      // not be counted yet when the eighth arrives.
      await until(() => stuck.max >= 3, 3_000).catch(() => {});
      // Without the shared bound each instance would hold 4: up to 8 open at once. (A lease stays
      // counted until its timed-out attempt is recorded, so the bound may be met with 3 open.)
      expect(stuck.max).toBeLessThanOrEqual(4);
      expect(stuck.max).toBeGreaterThanOrEqual(3);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });
});
