import { dirname, join } from 'node:path';
import vm from 'node:vm';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPostgres } from '../../../test/support/db.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestService,
} from '../../../test/support/service.ts';
import { BUNDLE_CHECK, BUNDLE_EXPECTED, bundleMainEntry, ENTRY, signedDelivery } from './bundleCheck.ts';

// The SDK's main entry bundled as a browser or edge app bundles it (esbuild, platform neutral and
// browser: a Node built-in anywhere in it fails the build), then run in a V8 context that has the
// web platform's globals and nothing of Node — no process, Buffer or require, as in Cloudflare
// Workers or Vercel Edge — against the real service on 127.0.0.1. Chromium runs the browser
// bundle in test/browser/sdkBundle.test.ts.

describe.skipIf(isPostgres)('the main entry in browsers and edge runtimes', () => {
  let svc: TestService;
  let baseUrl: string;
  let apiKey: string;

  beforeAll(async () => {
    svc = await createTestService();
    baseUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
    const bot = await activeBot(svc, await createOwner(svc), { fundCents: 750 });
    apiKey = bot.api_key;
  }, 120_000);
  afterAll(async () => {
    await svc?.close();
  });

  it('bundles for platform neutral and browser from its own files only, with no Node built-in', async () => {
    for (const platform of ['neutral', 'browser'] as const) {
      const { text, inputs } = await bundleMainEntry(platform, 'esm');
      expect(
        inputs.every((f) => f.startsWith('packages/client/src/')),
        inputs.join(),
      ).toBe(true);
      expect(inputs).not.toContain('packages/client/src/webhooks/verify.ts');
      expect(text).not.toMatch(/\brequire\(|node:|\bBuffer\b|process\./);
    }
    // The Node subpath does need Node, and the neutral build says so: the check has teeth.
    await expect(
      build({
        entryPoints: [join(dirname(ENTRY), 'webhooks/index.ts')],
        bundle: true,
        platform: 'neutral',
        write: false,
        logLevel: 'silent',
      }),
    ).rejects.toThrow(/node:/);
  });

  it('runs with web globals only (an edge runtime’s) against the real service', async () => {
    const { text } = await bundleMainEntry('neutral', 'iife');
    const edge = vm.createContext({
      fetch,
      Request,
      Response,
      Headers,
      URL,
      URLSearchParams,
      AbortController,
      AbortSignal,
      DOMException,
      TextEncoder,
      TextDecoder,
      crypto: globalThis.crypto,
      atob,
      btoa,
      setTimeout,
      clearTimeout,
      console,
    });
    vm.runInContext(text, edge, { filename: 'botpay-client.neutral.js' });
    expect(vm.runInContext('typeof process + typeof Buffer + typeof require', edge)).toBe(
      'undefinedundefinedundefined',
    );
    const check = vm.runInContext(`(${BUNDLE_CHECK})`, edge) as (
      sdk: unknown,
      input: unknown,
    ) => Promise<unknown>;
    const result = await check(vm.runInContext('BotPay', edge), signedDelivery(baseUrl, apiKey));
    expect(JSON.parse(JSON.stringify(result))).toEqual(BUNDLE_EXPECTED);
  });
});
