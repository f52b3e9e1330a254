import { verify } from '@octokit/webhooks-methods';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEGRADED_AFTER, nextHealth, UNREACHABLE_AFTER } from '../../src/webhooks/health.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  registerBot,
  type TestService,
} from '../support/service.ts';
import { connectionFor, isPostgres } from '../support/db.ts';
import { emit, healthOf, LoopbackRelay, Receiver } from './helpers.ts';

describe('webhook health', () => {
  let svc: TestService;
  let receiver: Receiver;
  let relay: LoopbackRelay;
  let worker: DeliveryWorker;
  const failing = new Set<string>();

  beforeAll(async () => {
    svc = await createTestService();
    receiver = await new Receiver().start();
    receiver.respond = (req, res) => {
      const path = req.url;
      res.writeHead(failing.has(path) ? 503 : 200);
      res.end(failing.has(path) ? 'down' : 'ok');
    };
    relay = new LoopbackRelay(receiver);
    svc.ctx.tunnelRelay = relay;
    worker = new DeliveryWorker(svc.ctx);
  });
  afterAll(async () => {
    await worker.stop();
    await receiver.close();
    await svc.close();
  });

  /** One event, one attempt; returns the bot's health afterwards. */
  async function attempt(botId: string) {
    await emit(svc, botId);
    expect(await worker.runOnce()).toBe(1);
    return healthOf(svc, botId);
  }

  it('active → degraded → unreachable → active, counting consecutive failures', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: receiver.url('/h1') } });
    await worker.runOnce();
    expect(await healthOf(svc, bot.bot_id)).toEqual({ webhook_status: 'active', webhook_fail_count: 0 });
    failing.add('/h1');
    for (let n = 1; n < DEGRADED_AFTER; n++) {
      expect(await attempt(bot.bot_id)).toEqual({ webhook_status: 'active', webhook_fail_count: n });
    }
    expect(await attempt(bot.bot_id)).toEqual({
      webhook_status: 'degraded',
      webhook_fail_count: DEGRADED_AFTER,
    });
    for (let n = DEGRADED_AFTER + 1; n < UNREACHABLE_AFTER; n++) {
      expect(await attempt(bot.bot_id)).toEqual({ webhook_status: 'degraded', webhook_fail_count: n });
    }
    expect(await attempt(bot.bot_id)).toEqual({
      webhook_status: 'unreachable',
      webhook_fail_count: UNREACHABLE_AFTER,
    });
    // Still queued and readable while unreachable.
    const status = await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    expect(status.json()).toMatchObject({
      webhook_status: 'unreachable',
      webhook_fail_count: UNREACHABLE_AFTER,
      pending_messages: UNREACHABLE_AFTER,
    });
    const messages = await svc.app.inject({ url: '/api/v1/bot/messages', headers: bot.auth });
    expect(messages.json().messages).toHaveLength(UNREACHABLE_AFTER);
    // One success: active again, count reset.
    failing.delete('/h1');
    expect(await attempt(bot.bot_id)).toEqual({ webhook_status: 'active', webhook_fail_count: 0 });
  });

  it('degraded → active on success', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { body: { callback_url: receiver.url('/h2') } });
    await worker.runOnce();
    failing.add('/h2');
    for (let n = 0; n < DEGRADED_AFTER; n++) await attempt(bot.bot_id);
    expect((await healthOf(svc, bot.bot_id)).webhook_status).toBe('degraded');
    failing.delete('/h2');
    expect(await attempt(bot.bot_id)).toEqual({ webhook_status: 'active', webhook_fail_count: 0 });
  });

  it('a tunnel bot starts pending; failures keep it pending until unreachable; success → active', async () => {
    const worked = await registerBot(svc, {
      callback_url: undefined,
      bot_type: 'helper',
      webhook_path: '/t1',
    });
    const neverWorked = await registerBot(svc, {
      callback_url: undefined,
      bot_type: 'helper',
      webhook_path: '/t2',
    });
    for (const b of [worked, neverWorked]) {
      expect(await healthOf(svc, b.bot_id)).toEqual({ webhook_status: 'pending', webhook_fail_count: 0 });
      const [row] = await svc.ctx.db.query<{ tunnel_hostname: string }>(
        'SELECT tunnel_hostname FROM bots WHERE id = $1',
        [b.bot_id],
      );
      relay.connected.add(row!.tunnel_hostname);
    }
    failing.add('/t2');
    for (let n = 1; n < UNREACHABLE_AFTER; n++) {
      expect(await attempt(neverWorked.bot_id)).toEqual({ webhook_status: 'pending', webhook_fail_count: n });
    }
    expect(await attempt(neverWorked.bot_id)).toEqual({
      webhook_status: 'unreachable',
      webhook_fail_count: UNREACHABLE_AFTER,
    });
    expect(await attempt(worked.bot_id)).toEqual({ webhook_status: 'active', webhook_fail_count: 0 });
    // Through the relay with identical bytes; a non-primary bot gets no Authorization header.
    const last = relay.forwarded.at(-1)!;
    expect(last.path).toBe('/t1');
    expect(last.headers.authorization).toBeUndefined();
    expect(
      await verify(worked.webhook_secret, last.body.toString('utf8'), last.headers['x-service-signature']!),
    ).toBe(true);
  });

  it('a primary tunnel bot gets Authorization: Bearer <hooks token> on each delivery', async () => {
    const bot = await registerBot(svc, { callback_url: undefined, webhook_path: '/primary' });
    expect(bot.primary_hooks_token).toMatch(/^svc_hooks_/);
    const [row] = await svc.ctx.db.query<{ tunnel_hostname: string }>(
      'SELECT tunnel_hostname FROM bots WHERE id = $1',
      [bot.bot_id],
    );
    relay.connected.add(row!.tunnel_hostname);
    await attempt(bot.bot_id);
    const got = receiver.requests.filter((r) => r.url === '/primary');
    expect(got).toHaveLength(1);
    expect(got[0]!.headers.authorization).toBe(`Bearer ${bot.primary_hooks_token}`);
    expect(got[0]!.headers['x-relayed-for']).toBe(row!.tunnel_hostname);
    expect(
      await verify(bot.webhook_secret, got[0]!.body, got[0]!.headers['x-service-signature'] as string),
    ).toBe(true);
  });

  it('the pure rule matches the table', () => {
    expect(nextHealth('active', 0, { reset: false, failures: 3 })).toEqual({
      status: 'degraded',
      failCount: 3,
    });
    expect(nextHealth('pending', 2, { reset: false, failures: 3 })).toEqual({
      status: 'pending',
      failCount: 5,
    });
    expect(nextHealth('pending', 5, { reset: false, failures: 1 })).toEqual({
      status: 'unreachable',
      failCount: 6,
    });
    expect(nextHealth('unreachable', 9, { reset: true, failures: 0 })).toEqual({
      status: 'active',
      failCount: 0,
    });
    expect(nextHealth('pending', 0, { reset: true, failures: 4 })).toEqual({
      status: 'degraded',
      failCount: 4,
    });
  });
});

// Two recording calls for the same bot at the same moment (two instances): the second waits for the
// bot row and then counts from the row the first wrote, so no failure is lost (the count used to be
// computed from the snapshot the call started with, and the later write won).
describe.runIf(isPostgres)('webhook health under concurrent recording', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  const RECORD = `SELECT * FROM webhook_record_and_claim(
      p_ids => '{x}'::text[], p_tokens => '{x}'::text[], p_ok => '{f}'::boolean[], p_status => '{503}'::int[],
      p_excerpt => '{down}'::text[], p_error => '{NULL}'::text[], p_duration => '{1}'::int[], p_via => '{x}'::text[],
      p_now => now(), p_delays => '{1}'::int[],
      p_health_bots => ARRAY[$1::text], p_health_reset => '{f}'::boolean[], p_health_failures => ARRAY[$2::int],
      p_degraded_after => ${DEGRADED_AFTER}, p_unreachable_after => ${UNREACHABLE_AFTER},
      p_until => now(), p_token => '', p_per_bot => 8, p_room => 0, p_skip => '{}'::text[], p_candidates => 0)`;

  it('both calls count: one failure each makes two', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const before = await healthOf(svc, bot.bot_id);
    expect(before.webhook_fail_count).toBe(0);
    const url = connectionFor(svc.database.schema!);
    const a = new pg.Client({ connectionString: url });
    const b = new pg.Client({ connectionString: url });
    await a.connect();
    await b.connect();
    try {
      await a.query('BEGIN');
      await a.query(RECORD, [bot.bot_id, 1]);
      await b.query('BEGIN');
      // Waits for the bot row that the first call holds.
      const second = b.query(RECORD, [bot.bot_id, 1]);
      await new Promise((r) => setTimeout(r, 200));
      await a.query('COMMIT');
      await second;
      await b.query('COMMIT');
      expect(await healthOf(svc, bot.bot_id)).toEqual({
        webhook_status: before.webhook_status,
        webhook_fail_count: 2,
      });
    } finally {
      await a.end();
      await b.end();
    }
  });

  // Two calls whose batches hold the same two bots (two instances): without an order, one call
  // locks them hi-then-lo while the other holds lo and wants hi, and PostgreSQL aborts one of them
  // after deadlock_timeout (its results are recorded again later, the deliveries stall meanwhile).
  // The function locks the bot rows it will change in id order first, so the second call waits
  // while holding none.
  it('two calls over the same bots in different orders do not deadlock', async () => {
    const owner = await createOwner(svc);
    const ids = [(await activeBot(svc, owner)).bot_id, (await activeBot(svc, owner)).bot_id].sort();
    const [lo, hi] = ids as [string, string];
    // The hi bot's row first in the table too (a new row version of lo goes after it), so the old
    // function took hi first whichever way it joined.
    await svc.ctx.db.query('UPDATE bots SET webhook_fail_count = webhook_fail_count WHERE id = $1', [lo]);
    const recordMany = RECORD.replace('ARRAY[$1::text]', '$1::text[]')
      .replace(
        "'{f}'::boolean[], p_health_failures",
        'array_fill(false, ARRAY[cardinality($1::text[])]), p_health_failures',
      )
      .replace('ARRAY[$2::int]', '$2::int[]');
    const url = connectionFor(svc.database.schema!);
    const a = new pg.Client({ connectionString: url });
    const c = new pg.Client({ connectionString: url });
    await a.connect();
    await c.connect();
    try {
      // c: a call that took lo and is about to take hi (the order every call now uses).
      await c.query('BEGIN');
      await c.query('SELECT 1 FROM bots WHERE id = $1 FOR UPDATE', [lo]);
      // a: a call listing hi first. It waits for lo, holding nothing (it used to hold hi).
      await a.query('BEGIN');
      const first = a
        .query(recordMany, [
          [hi, lo],
          [1, 1],
        ])
        .then(
          () => null,
          (error: Error) => error,
        );
      await new Promise((r) => setTimeout(r, 200));
      await c.query(recordMany, [[hi], [1]]); // waited for a's hi before: a deadlock
      await c.query('COMMIT');
      expect(await first).toBeNull();
      await a.query('COMMIT');
      expect((await healthOf(svc, lo)).webhook_fail_count).toBe(1);
      expect((await healthOf(svc, hi)).webhook_fail_count).toBe(2);
    } finally {
      await a.end();
      await c.end();
    }
  });
});
