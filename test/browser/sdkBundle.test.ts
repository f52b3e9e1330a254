import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveChromium, launchChromium, requireChromiumInCi } from '../support/browser.ts';
import {
  BUNDLE_CHECK,
  BUNDLE_EXPECTED,
  bundleMainEntry,
  signedDelivery,
} from '../../packages/client/test/bundleCheck.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

// The SDK's main entry in a real browser (Debian Chromium through playwright-core): bundled by
// esbuild for platform browser, loaded by a page as an ES module, calling the real service and
// verifying a signed webhook delivery with the browser's Web Crypto. The page and the API share
// one origin on 127.0.0.1 (a page on another origin would need CORS, which the bot API does not
// offer: bots are not web pages), served by a small server that forwards /api/ to the service.

requireChromiumInCi('the SDK bundled for the browser, in Chromium');

describe.skipIf(!haveChromium)('the SDK bundled for the browser, in Chromium', () => {
  let svc: TestService;
  let site: Server;
  let origin: string;
  let browser: Browser;
  let apiKey: string;

  beforeAll(async () => {
    svc = await createTestService();
    apiKey = (await activeBot(svc, await createOwner(svc), { fundCents: 750 })).api_key;
    const { text: bundle } = await bundleMainEntry('browser', 'esm');
    site = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', async () => {
        if (req.url === '/') {
          res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>bot</title>');
        } else if (req.url === '/botpay-client.js') {
          res.writeHead(200, { 'content-type': 'text/javascript' }).end(bundle);
        } else if (req.url?.startsWith('/api/')) {
          const answer = await svc.app.inject({
            method: req.method as 'GET' | 'POST',
            url: req.url,
            headers: req.headers,
            ...(chunks.length ? { payload: Buffer.concat(chunks) } : {}),
          });
          res.writeHead(answer.statusCode, { 'content-type': String(answer.headers['content-type'] ?? '') });
          res.end(answer.rawPayload);
        } else {
          res.writeHead(404).end();
        }
      });
    });
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
    origin = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
    browser = await launchChromium();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await new Promise((r) => site?.close(r));
    await svc?.close();
  });

  it('calls the service and verifies a webhook with Web Crypto', async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${origin}/`);
    const input = signedDelivery(origin, apiKey);
    // Source text, not a function: vitest rewrites import() in the test's own code.
    const result = await page.evaluate(`(async () => {
      const sdk = await import('/botpay-client.js');
      return (${BUNDLE_CHECK})(sdk, ${JSON.stringify(input)});
    })()`);
    expect(result).toEqual(BUNDLE_EXPECTED);
    expect(errors).toEqual([]);
  });
});
