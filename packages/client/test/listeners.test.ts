import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { BotPayClient } from '../src/client.ts';
import { abortableSleep } from '../src/retry.ts';
import { scriptedServer } from './helpers.ts';

// A bot passes one long-lived AbortSignal to every call and every wait. Nothing the client does may
// leave a listener behind on it: a wait polls hundreds of times, and Node warns
// (MaxListenersExceededWarning) once eleven listeners pile up on one signal.

describe('abort listeners on a long-lived signal', () => {
  const warnings: Error[] = [];
  const onWarning = (w: Error) => warnings.push(w);
  afterEach(() => {
    process.off('warning', onWarning);
  });

  it('stay at zero between polls of a long wait, and no warning is emitted', async () => {
    process.on('warning', onWarning);
    let polls = 0;
    const server = await scriptedServer((_req, res) => {
      polls++;
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          confirmation_id: 'chk_a',
          status: polls < 60 ? 'pending_confirmation' : 'approved',
        }),
      );
    });
    try {
      const controller = new AbortController();
      // The signal a bot composes from its own (as examples/bot does).
      const signal = AbortSignal.any([controller.signal, new AbortController().signal]);
      const seen: number[] = [];
      const bot = new BotPayClient({
        baseUrl: server.url,
        apiKey: `svc_live_${'a'.repeat(48)}`,
        // Real abortable sleeps, just short.
        sleep: (_ms, s) => abortableSleep(1, s),
      });
      for (let round = 0; round < 3; round++) {
        polls = 0;
        const result = await bot.waitForDecision('chk_a', {
          signal,
          onPoll: () => seen.push(getEventListeners(signal, 'abort').length),
        });
        expect(result.status).toBe('approved');
      }
      expect(seen.length).toBe(180);
      expect(Math.max(...seen)).toBeLessThanOrEqual(1);
      expect(getEventListeners(signal, 'abort')).toHaveLength(0);
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
    } finally {
      await server.close();
    }
  });
});
