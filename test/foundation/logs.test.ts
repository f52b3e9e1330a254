import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';
import { checkout, purchase, setupCard } from '../checkout/helpers.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { emit, Receiver } from '../webhooks/helpers.ts';

describe('logs never contain secrets', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService({ env: { LOG_LEVEL: 'trace' } });
  });
  afterAll(async () => {
    await svc.close();
  });

  it('after registrations, a claim, funding, key rotation and authenticated calls', async () => {
    const owner = await createOwner(svc);
    const secrets: string[] = [owner.token];
    // A tunnel bot (tunnel token, hooks token) and a callback bot, both claimed and funded.
    for (const body of [{}, { callback_url: 'https://bot.example.com/hook' }]) {
      const bot = await activeBot(svc, owner, { fundCents: 2500, body });
      secrets.push(bot.api_key, bot.claim_token!, bot.webhook_secret);
      if (typeof bot.tunnel_token === 'string') secrets.push(bot.tunnel_token);
      if (typeof bot.primary_hooks_token === 'string') secrets.push(bot.primary_hooks_token);
      await svc.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
      // The claim link carries the token in its query string: visiting it must not log it.
      await svc.app.inject({ url: `/claim?token=${bot.claim_token}` });
      const rotated = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/api-key/rotate`,
        headers: owner.auth,
      });
      secrets.push(rotated.json().api_key);
    }
    const pairing = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/owner/pairing-codes',
      headers: owner.auth,
    });
    secrets.push(pairing.json().pairing_code);
    // A failed authentication with a real-looking key must not log it either.
    await svc.app.inject({
      url: '/api/v1/bot/status',
      headers: { authorization: `Bearer svc_live_${'ab'.repeat(24)}` },
    });
    secrets.push(`svc_live_${'ab'.repeat(24)}`);

    const logs = svc.logs();
    expect(logs.length).toBeGreaterThan(1000); // the requests were logged…
    expect(logs).toContain('/api/v1/bot/status');
    for (const secret of secrets) expect(logs, `secret ${secret.slice(0, 12)}… leaked`).not.toContain(secret);
  });

  it('at trace, what each request decided is logged (refusal and its step, hold, approval, delivery attempt), with no secret', async () => {
    const owner = await createOwner(svc);
    const receiver = await new Receiver().start();
    const bot = await activeBot(svc, owner, { fundCents: 1000, body: { callback_url: receiver.url() } });
    const secrets: string[] = [owner.token, bot.api_key, bot.webhook_secret];
    const card = await setupCard(svc, owner, bot.bot_id, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 300,
      per_transaction_cents: 600,
    });
    const approved = await checkout(svc, bot, purchase(card.real_profile_index, 100));
    expect(approved.statusCode).toBe(200);
    secrets.push(
      `"${approved.json().missing_digits}"`,
      `"missing_digits":"${approved.json().missing_digits}"`,
    );
    const held = await checkout(svc, bot, purchase(card.real_profile_index, 400));
    expect(held.statusCode).toBe(202);
    const refused = await checkout(svc, bot, purchase(card.real_profile_index, 700));
    expect(refused.json().error).toBe('card_guardrail_violation');
    // Deliveries of the events (signed with the webhook secret): one accepted, then one refused.
    const worker = new DeliveryWorker(svc.ctx);
    await worker.runOnce();
    receiver.respond = (_r, res) => {
      res.writeHead(500);
      res.end('no');
    };
    await emit(svc, bot.bot_id);
    await worker.runOnce();
    await worker.stop();
    await receiver.close();
    for (const r of receiver.requests) {
      secrets.push(String(r.headers['x-service-signature']), String(r.headers['webhook-signature']));
    }

    const lines = svc
      .logs()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { level: number; msg: string; decision?: Record<string, unknown> });
    const decisions = lines.filter((l) => l.decision).map((l) => l.decision!);
    expect(decisions).toContainEqual({
      route: 'POST /api/v1/bot/merchant/checkout',
      status: 200,
      outcome: 'approved',
    });
    expect(decisions).toContainEqual({
      route: 'POST /api/v1/bot/merchant/checkout',
      status: 202,
      outcome: 'held for the owner',
    });
    expect(decisions).toContainEqual(
      expect.objectContaining({
        route: 'POST /api/v1/bot/merchant/checkout',
        status: 403,
        outcome: 'refused',
        error: 'card_guardrail_violation',
        step: 'card guardrails',
        details: expect.objectContaining({ limit: 'per_transaction', limit_usd: 6 }),
      }),
    );
    expect(lines.some((l) => l.msg === 'webhook delivered' && l.level === 20)).toBe(true);
    expect(lines.some((l) => l.msg === 'webhook attempt failed')).toBe(true);
    expect(lines.some((l) => l.msg === 'webhook deliveries claimed' && l.level === 10)).toBe(true);
    const logs = svc.logs();
    for (const secret of secrets) expect(logs, `secret ${secret.slice(0, 14)}… leaked`).not.toContain(secret);
  });

  it('a logged database error keeps its SQL but not its parameters (hashes, encrypted secrets)', async () => {
    const secret = 'svc_live_0123456789abcdef0123456789abcdef0123456789abcdef';
    let caught: unknown;
    try {
      await svc.ctx.db.query('SELECT $1::text AS n FROM no_such_table', [secret]);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeDefined();
    svc.ctx.logger.error({ err: caught }, 'database error for the test');
    const line = svc
      .logs()
      .split('\n')
      .find((l) => l.includes('database error for the test'))!;
    expect(line).toContain('no_such_table');
    expect(line).not.toContain(secret);
  });
});

describe('per-request logger (lazyChildLoggerFactory)', () => {
  it('writes request lines with the request id at an enabled level, and makes no pino child below it', async () => {
    const { Writable } = await import('node:stream');
    const { createLogger, lazyChildLoggerFactory } = await import('../../src/platform/logger.ts');
    const lines: string[] = [];
    const stream = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const logger = createLogger('warn', stream);
    let children = 0;
    const child = logger.child.bind(logger);
    logger.child = ((...args: Parameters<typeof logger.child>) => {
      children++;
      return child(...args);
    }) as typeof logger.child;
    const requestLog = lazyChildLoggerFactory(logger, { reqId: 'req-1' }, {});
    requestLog.info({ url: '/x' }, 'incoming request');
    requestLog.debug('details');
    expect(children).toBe(0);
    expect(requestLog.level).toBe('warn');
    requestLog.warn({ api_key: 'svc_live_secret' }, 'database unavailable');
    expect(children).toBe(1);
    const line = JSON.parse(lines[0]!);
    expect(line).toMatchObject({ reqId: 'req-1', msg: 'database unavailable', api_key: '[Redacted]' });
    requestLog.error('again');
    expect(children).toBe(1);
    expect(lines).toHaveLength(2);
  });
});
