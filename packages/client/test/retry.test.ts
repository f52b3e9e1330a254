import { afterEach, describe, expect, it } from 'vitest';
import { BotPayClient } from '../src/client.ts';
import { BotPayError } from '../src/errors.ts';
import { backoffDelay, DEFAULT_RETRY } from '../src/retry.ts';
import { API_KEY, hangUp, json, recordingSleep, type Script, scriptedServer } from './helpers.ts';

// Retries, backoff and idempotency against a local flaky HTTP server (real sockets, scripted answers).

const STATUS = {
  bot_id: 'bot_x',
  bot_name: 'x',
  status: 'pending',
  default_rail: null,
  rails: {},
  master_guardrails: null,
};
const APPROVED = {
  approved: true,
  missing_digits: '123',
  expiry_month: '04',
  expiry_year: '2029',
  confirmation_id: 'chk_a',
  profile_index: 2,
  merchant_name: 'M',
  amount_usd: 1.5,
  message: 'ok',
};
const CHECKOUT = {
  profile_index: 2,
  merchant_name: 'M',
  merchant_url: 'https://m.example',
  item_name: 'thing',
  amount_cents: 150,
};

let closeServer: (() => Promise<void>) | undefined;
afterEach(async () => {
  await closeServer?.();
  closeServer = undefined;
});

async function setup(
  script: Script,
  options: { maxAttempts?: number; maxRetryAfterSeconds?: number; timeoutMs?: number } = {},
) {
  const server = await scriptedServer(script);
  closeServer = server.close;
  const sleeper = recordingSleep();
  const client = new BotPayClient({
    baseUrl: server.url,
    apiKey: API_KEY,
    sleep: sleeper.sleep,
    random: () => 0.5,
    timeoutMs: options.timeoutMs ?? 5_000,
    retry: {
      ...(options.maxAttempts ? { maxAttempts: options.maxAttempts } : {}),
      ...(options.maxRetryAfterSeconds ? { maxRetryAfterSeconds: options.maxRetryAfterSeconds } : {}),
    },
  });
  return { server, client, waits: sleeper.waits };
}

describe('automatic retries', () => {
  it('retries a read through 503s with growing jittered backoff, then succeeds', async () => {
    const { server, client, waits } = await setup((_req, res, i) =>
      i < 2 ? json(res, 503, { error: 'service_unavailable', message: 'later' }) : json(res, 200, STATUS),
    );
    await expect(client.status()).resolves.toMatchObject({ bot_id: 'bot_x' });
    expect(server.requests).toHaveLength(3);
    expect(server.requests.every((r) => r.headers.authorization === `Bearer ${API_KEY}`)).toBe(true);
    // random() = 0.5: half the step fixed plus a quarter → 0.75 × 300, 0.75 × 600.
    expect(waits).toEqual([225, 450]);
  });

  it('honours retry_after_seconds of a 429 body, and the Retry-After header', async () => {
    const { server, client, waits } = await setup((_req, res, i) => {
      if (i === 0)
        return json(res, 429, { error: 'rate_limited', message: 'slow down', retry_after_seconds: 7 });
      if (i === 1) return json(res, 429, { error: 'rate_limited', message: 'again' }, { 'retry-after': '3' });
      return json(res, 200, STATUS);
    });
    await client.status();
    expect(server.requests).toHaveLength(3);
    expect(waits[0]).toBeGreaterThanOrEqual(7_000);
    expect(waits[0]).toBeLessThan(8_000);
    expect(waits[1]).toBeGreaterThanOrEqual(3_000);
    expect(waits[1]).toBeLessThan(4_000);
  });

  it('hands back a Retry-After longer than the caller will wait, without waiting', async () => {
    const { server, client, waits } = await setup((_req, res) =>
      json(res, 429, { error: 'rate_limited', message: 'Too many registrations', retry_after_seconds: 3600 }),
    );
    const error = await client.register({ bot_name: 'b', owner_email: 'o@example.com' }).catch((e) => e);
    expect(error).toBeInstanceOf(BotPayError);
    expect(error).toMatchObject({ status: 429, code: 'rate_limited', retryAfterSeconds: 3600 });
    expect(server.requests).toHaveLength(1);
    expect(waits).toEqual([]);
  });

  it('retries a registration refused with a short 429 (nothing happened), but not after a network error', async () => {
    const limited = await setup((_req, res, i) =>
      i === 0
        ? json(res, 429, { error: 'rate_limited', message: 'x', retry_after_seconds: 2 })
        : json(res, 201, {
            bot_id: 'bot_r',
            api_key: API_KEY,
            claim_token: 'c',
            status: 'pending_owner_verification',
            important: '!',
          }),
    );
    await expect(
      limited.client.register({ bot_name: 'b', owner_email: 'o@example.com' }),
    ).resolves.toMatchObject({
      bot_id: 'bot_r',
    });
    expect(limited.server.requests).toHaveLength(2);
    await closeServer?.();

    const reset = await setup((_req, res) => hangUp(res));
    const error = await reset.client
      .register({ bot_name: 'b', owner_email: 'o@example.com' })
      .catch((e) => e);
    expect(error).toMatchObject({ status: 0, code: 'network_error' });
    expect(reset.server.requests).toHaveLength(1);
  });

  it('retries network errors on reads and gives up after maxAttempts with the last error', async () => {
    const { server, client, waits } = await setup((_req, res) => hangUp(res), { maxAttempts: 3 });
    const error = await client.walletCheck().catch((e) => e);
    expect(error).toBeInstanceOf(BotPayError);
    expect(error.code).toBe('network_error');
    expect(error.transient).toBe(true);
    expect(server.requests).toHaveLength(3);
    expect(waits).toHaveLength(2);
  });

  it('retries a read whose answer is cut off half-way through the body', async () => {
    const { server, client } = await setup((_req, res, i) => {
      if (i > 0) return json(res, 200, STATUS);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
      res.write('{"bot_id":"bot_');
      setTimeout(() => res.socket?.destroy(), 20);
    });
    await expect(client.status()).resolves.toMatchObject({ bot_id: 'bot_x' });
    expect(server.requests).toHaveLength(2);
  });

  it('times out an attempt that gets no answer and retries it', async () => {
    const { server, client } = await setup(() => {}, { maxAttempts: 2, timeoutMs: 150 });
    const error = await client.status().catch((e) => e);
    expect(error).toMatchObject({ status: 0, code: 'timeout' });
    expect(server.requests).toHaveLength(2);
  });

  it('does not retry client errors, and reports code, message and details', async () => {
    const { server, client } = await setup((_req, res) =>
      json(
        res,
        403,
        {
          error: 'allowance_exceeded',
          message: 'Over the weekly allowance.',
          limit_usd: 50,
          remaining_usd: 3.5,
        },
        { 'x-request-id': 'req-1' },
      ),
    );
    const error = (await client.checkout(CHECKOUT).catch((e) => e)) as BotPayError;
    expect(server.requests).toHaveLength(1);
    expect(error).toMatchObject({
      status: 403,
      code: 'allowance_exceeded',
      message: 'Over the weekly allowance.',
    });
    expect(error.limitUsd).toBe(50);
    expect(error.remainingUsd).toBe(3.5);
    expect(error.requestId).toBe('req-1');
    expect(error.transient).toBe(false);
  });

  it('turns a non-JSON error page into unexpected_response and retries it on reads', async () => {
    const { server, client } = await setup(
      (_req, res) => {
        res.writeHead(502, { 'content-type': 'text/html' });
        res.end('<html>Bad gateway</html>');
      },
      { maxAttempts: 2 },
    );
    const error = await client.status().catch((e) => e);
    expect(error).toMatchObject({ status: 502, code: 'unexpected_response' });
    expect(error.details.body).toContain('Bad gateway');
    expect(server.requests).toHaveLength(2);
  });

  it('cancels a call and its pending retries when the signal aborts', async () => {
    const server = await scriptedServer((_req, res) => json(res, 503, { error: 'service_unavailable' }));
    closeServer = server.close;
    const client = new BotPayClient({ baseUrl: server.url, apiKey: API_KEY, retry: { baseDelayMs: 60_000 } });
    const controller = new AbortController();
    const started = Date.now();
    const pending = client.status({ signal: controller.signal });
    setTimeout(() => controller.abort(new Error('stop')), 100);
    await expect(pending).rejects.toThrow('stop');
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(server.requests).toHaveLength(1);
  });
});

describe('checkout idempotency', () => {
  it('sends one Idempotency-Key per logical checkout and reuses it across retries', async () => {
    const { server, client } = await setup((_req, res, i) =>
      i === 0 ? hangUp(res) : json(res, 200, APPROVED),
    );
    await expect(client.checkout(CHECKOUT)).resolves.toMatchObject({ approved: true, missing_digits: '123' });
    expect(server.requests).toHaveLength(2);
    const [first, second] = server.requests;
    expect(first!.headers['idempotency-key']).toMatch(/^[0-9a-f-]{36}$/);
    expect(second!.headers['idempotency-key']).toBe(first!.headers['idempotency-key']);
    expect(JSON.parse(second!.body)).toEqual(CHECKOUT);
    expect(second!.headers['content-type']).toBe('application/json');

    await client.checkout(CHECKOUT);
    expect(server.requests[2]!.headers['idempotency-key']).not.toBe(first!.headers['idempotency-key']);
    await client.checkout(CHECKOUT, { idempotencyKey: 'order-42' });
    expect(server.requests[3]!.headers['idempotency-key']).toBe('order-42');
  });

  it('asks for the next task with no body and no Content-Type, and polls status by query', async () => {
    const { server, client } = await setup((req, res) =>
      req.url.startsWith('/api/v1/bot/tasks/next')
        ? json(res, 200, { has_task: false, message: 'No task.' })
        : json(res, 200, { confirmation_id: 'chk_a b', status: 'pending' }),
    );
    await expect(client.nextTask()).resolves.toEqual({ has_task: false, message: 'No task.' });
    expect(server.requests[0]).toMatchObject({ method: 'POST', body: '' });
    expect(server.requests[0]!.headers['content-type']).toBeUndefined();
    await client.checkoutStatus('chk_a b');
    expect(server.requests[1]!.url).toBe('/api/v1/bot/merchant/checkout/status?confirmation_id=chk_a+b');
  });

  it('acknowledges messages with event_ids', async () => {
    const { server, client } = await setup((_req, res) => json(res, 200, { acknowledged: 2 }));
    await client.ackMessages(['evt_a', 'evt_b']);
    expect(server.requests[0]).toMatchObject({ method: 'POST', url: '/api/v1/bot/messages/ack' });
    expect(JSON.parse(server.requests[0]!.body)).toEqual({ event_ids: ['evt_a', 'evt_b'] });
  });
});

describe('backoffDelay', () => {
  it('stays within [step/2, step] and caps at maxDelayMs', () => {
    for (let retry = 0; retry < 12; retry++) {
      const step = Math.min(DEFAULT_RETRY.maxDelayMs, DEFAULT_RETRY.baseDelayMs * 2 ** retry);
      expect(backoffDelay(retry, DEFAULT_RETRY, () => 0)).toBe(step / 2);
      expect(backoffDelay(retry, DEFAULT_RETRY, () => 0.999_999)).toBeLessThanOrEqual(step);
    }
    expect(backoffDelay(30, DEFAULT_RETRY, () => 0.999_999)).toBeLessThanOrEqual(DEFAULT_RETRY.maxDelayMs);
  });

  it('never waits less than Retry-After', () => {
    expect(backoffDelay(0, DEFAULT_RETRY, () => 0, 5)).toBe(5_000);
    expect(backoffDelay(3, DEFAULT_RETRY, () => 0.999_999, 5)).toBeLessThan(6_001);
  });
});
