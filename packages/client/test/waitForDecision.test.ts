import { afterEach, describe, expect, it } from 'vitest';
import { BotPayClient } from '../src/client.ts';
import { API_KEY, json, scriptedServer } from './helpers.ts';

// The documented polling schedule, driven by a fake clock: the injected sleep advances it instead of
// waiting. The status endpoint is a scripted local server (the real one is exercised in
// client.service.test.ts once the checkout module is present).

let closeServer: (() => Promise<void>) | undefined;
afterEach(async () => {
  await closeServer?.();
  closeServer = undefined;
});

function fakeTime() {
  let now = 1_000_000;
  return {
    now: () => now,
    sleep: async (ms: number, signal?: AbortSignal) => {
      if (signal?.aborted) throw signal.reason;
      now += ms;
    },
    elapsed: () => now - 1_000_000,
  };
}

async function statusServer(decideAfterMs: number, final: string, time: ReturnType<typeof fakeTime>) {
  const polledAt: number[] = [];
  const server = await scriptedServer((req, res) => {
    polledAt.push(time.elapsed());
    const id = new URL(req.url, 'http://x').searchParams.get('confirmation_id');
    const decided = time.elapsed() >= decideAfterMs;
    json(res, 200, {
      confirmation_id: id,
      status: decided ? final : 'pending',
      amount_usd: 4.2,
      merchant_name: 'M',
      item_name: 'I',
      message: decided ? 'done' : 'waiting',
      ...(decided && final === 'approved'
        ? { missing_digits: '987', expiry_month: '01', expiry_year: '2030' }
        : {}),
    });
  });
  closeServer = server.close;
  return { server, polledAt };
}

describe('waitForDecision', () => {
  it('polls every 5 s for the first minute, then every 15 s, until approved', async () => {
    const time = fakeTime();
    const { server, polledAt } = await statusServer(100_000, 'approved', time);
    const client = new BotPayClient({
      baseUrl: server.url,
      apiKey: API_KEY,
      sleep: time.sleep,
      now: time.now,
    });
    const result = await client.waitForDecision('chk_abc');
    expect(result).toMatchObject({ status: 'approved', missing_digits: '987', confirmation_id: 'chk_abc' });
    expect(polledAt).toEqual([
      0, 5_000, 10_000, 15_000, 20_000, 25_000, 30_000, 35_000, 40_000, 45_000, 50_000, 55_000, 60_000,
      75_000, 90_000, 105_000,
    ]);
  });

  it('returns denied and expired as final answers too', async () => {
    for (const final of ['denied', 'expired']) {
      const time = fakeTime();
      const { server, polledAt } = await statusServer(10_000, final, time);
      const client = new BotPayClient({
        baseUrl: server.url,
        apiKey: API_KEY,
        sleep: time.sleep,
        now: time.now,
      });
      await expect(client.waitForDecision('chk_x')).resolves.toMatchObject({ status: final });
      expect(polledAt).toEqual([0, 5_000, 10_000]);
      await closeServer?.();
      closeServer = undefined;
    }
  });

  it('rides out transient failures between polls but stops at once on a 404', async () => {
    const time = fakeTime();
    let calls = 0;
    const server = await scriptedServer((_req, res) => {
      calls++;
      if (calls <= 3) return json(res, 503, { error: 'service_unavailable' });
      if (calls === 4)
        return json(res, 200, { confirmation_id: 'chk_a', status: 'approved', missing_digits: '1' });
      return json(res, 404, { error: 'not_found', message: 'Confirmation not found.' });
    });
    closeServer = server.close;
    // One attempt per poll, so each 503 reaches waitForDecision.
    const client = new BotPayClient({
      baseUrl: server.url,
      apiKey: API_KEY,
      sleep: time.sleep,
      now: time.now,
      retry: { maxAttempts: 1 },
    });
    await expect(client.waitForDecision('chk_a')).resolves.toMatchObject({ status: 'approved' });
    expect(time.elapsed()).toBe(15_000);
    await expect(client.waitForDecision('chk_gone')).rejects.toMatchObject({
      status: 404,
      code: 'not_found',
    });
  });

  it('is cancelled by an AbortSignal while waiting', async () => {
    const time = fakeTime();
    const { server } = await statusServer(Number.POSITIVE_INFINITY, 'approved', time);
    const client = new BotPayClient({ baseUrl: server.url, apiKey: API_KEY, now: time.now });
    const controller = new AbortController();
    let polls = 0;
    const waiting = client.waitForDecision('chk_a', {
      signal: controller.signal,
      sleep: async (ms, signal) => {
        time.sleep(ms);
        if (polls === 3) controller.abort(new Error('owner went away'));
        if (signal?.aborted) throw signal.reason;
      },
      onPoll: () => {
        polls++;
      },
    });
    await expect(waiting).rejects.toThrow('owner went away');
    expect(polls).toBe(3);
  });

  it('gives up after maxWaitMs with a timeout error', async () => {
    const time = fakeTime();
    const { server, polledAt } = await statusServer(Number.POSITIVE_INFINITY, 'approved', time);
    const client = new BotPayClient({
      baseUrl: server.url,
      apiKey: API_KEY,
      sleep: time.sleep,
      now: time.now,
    });
    await expect(client.waitForDecision('chk_a', { maxWaitMs: 20_000 })).rejects.toMatchObject({
      code: 'timeout',
    });
    expect(polledAt).toEqual([0, 5_000, 10_000, 15_000, 20_000]);
  });

  it('polls last at the deadline when maxWaitMs is not a whole number of intervals', async () => {
    const time = fakeTime();
    const { server, polledAt } = await statusServer(Number.POSITIVE_INFINITY, 'approved', time);
    const client = new BotPayClient({
      baseUrl: server.url,
      apiKey: API_KEY,
      sleep: time.sleep,
      now: time.now,
    });
    await expect(client.waitForDecision('chk_a', { maxWaitMs: 7_000 })).rejects.toMatchObject({
      code: 'timeout',
    });
    expect(polledAt).toEqual([0, 5_000, 7_000]);
  });
});
