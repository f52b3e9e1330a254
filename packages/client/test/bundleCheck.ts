import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { signPayload, signStandard } from '../src/webhooks/verify.ts';

// What a bundle of the SDK's main entry must do wherever it runs (packages/client/test/bundle.test.ts
// with web globals only, test/browser/sdkBundle.test.ts in Chromium): call a real service, refuse a
// wrong key with the spec's 401, verify a signed webhook delivery with Web Crypto. The check is
// JavaScript source, so that the same text runs in a vm context and in a page.

export interface BundleInput {
  baseUrl: string;
  apiKey: string;
  secret: string;
  body: string;
  headers: Record<string, string>;
}

/** A delivery signed by the node:crypto functions (what the service sends). */
export function signedDelivery(baseUrl: string, apiKey: string): BundleInput {
  const secret = `whsec_${'5a'.repeat(24)}`;
  const body = JSON.stringify({
    id: 'evt_bundle',
    event: 'purchase.approved',
    timestamp: new Date().toISOString(),
    bot_id: 'bot_x',
    data: {},
  });
  const at = Math.floor(Date.now() / 1000);
  return {
    baseUrl,
    apiKey,
    secret,
    body,
    headers: {
      'content-type': 'application/json',
      'webhook-id': 'evt_bundle',
      'webhook-timestamp': String(at),
      'webhook-signature': signStandard(body, secret, 'evt_bundle', at),
      'x-service-signature': signPayload(body, secret),
    },
  };
}

/** An async function of (the bundle's exports, BundleInput), as source text. */
export const BUNDLE_CHECK = `async (BotPay, input) => {
  const { BotPayClient, isBotPayError, verifyWebhookRequest, verifySignatureAsync, signStandardAsync } = BotPay;
  const bot = new BotPayClient({ baseUrl: input.baseUrl, apiKey: input.apiKey });
  const status = await bot.status();
  const wallet = await bot.walletCheck();
  let refused;
  try {
    await new BotPayClient({ baseUrl: input.baseUrl, apiKey: 'svc_live_' + '0'.repeat(48) }).status();
  } catch (e) {
    refused = isBotPayError(e) ? e.status + ' ' + e.code : String(e);
  }
  const request = new Request('https://bot.example.com/hook', { method: 'POST', headers: input.headers, body: input.body });
  const verified = await verifyWebhookRequest(request, input.secret);
  const tampered = await verifySignatureAsync(input.body + ' ', input.headers['x-service-signature'], input.secret);
  const resigned = await signStandardAsync(input.body, input.secret, input.headers['webhook-id'], Number(input.headers['webhook-timestamp']));
  return {
    status: status.status,
    balance: wallet.balance_usd,
    refused,
    event: verified.ok ? verified.event.event : verified.reason,
    tampered,
    sameSignature: resigned === input.headers['webhook-signature'],
  };
}`;

export const BUNDLE_EXPECTED = {
  status: 'active',
  balance: 7.5,
  refused: '401 Authentication required',
  event: 'purchase.approved',
  tampered: false,
  sameSignature: true,
};

export const ENTRY = resolve(dirname(fileURLToPath(import.meta.url)), '../src/index.ts');

/** The main entry bundled by esbuild as an app would bundle it; the files it took in. */
export async function bundleMainEntry(platform: 'browser' | 'neutral', format: 'esm' | 'iife') {
  const result = await build({
    entryPoints: [ENTRY],
    bundle: true,
    platform,
    format,
    ...(format === 'iife' ? { globalName: 'BotPay' } : {}),
    target: 'es2022',
    write: false,
    metafile: true,
    logLevel: 'silent',
  });
  return { text: result.outputFiles[0]?.text ?? '', inputs: Object.keys(result.metafile.inputs) };
}
