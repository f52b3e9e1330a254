import { createHmac } from 'node:crypto';
import { sign as signGithubStyle } from '@octokit/webhooks-methods';
import fc from 'fast-check';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { signPayload, signStandard, verifySignature, verifyStandardWebhook } from '../src/webhooks/verify.ts';
import {
  base64Bytes,
  signPayloadAsync,
  signStandardAsync,
  verifySignatureAsync,
  verifyStandardWebhookAsync,
  verifyWebhookRequest,
} from '../src/webhooks/web.ts';

// The Web Crypto signature functions of the main entry against the node:crypto ones of
// '@botpay/client/webhooks' (the same answer for any body, secret, header and clock), and against
// independent implementations of both schemes: the reference `standardwebhooks` package and
// @octokit/webhooks-methods (sha256=<hex>).

const SECRET = `whsec_${'3c'.repeat(24)}`;
const standardSecretArb = fc
  .uint8Array({ minLength: 16, maxLength: 40 })
  .map((b) => `whsec_${Buffer.from(b).toString('base64')}`);

describe('Web Crypto webhook signatures', () => {
  it('reads base64 exactly as Node’s Buffer does (the service keys its signatures with Buffer)', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 60, unit: fc.constantFrom(...'AZaz09+/-_= *\n.'.split('')) }),
        (s) => {
          expect(Buffer.from(base64Bytes(s)).toString('hex')).toBe(Buffer.from(s, 'base64').toString('hex'));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('signs what node:crypto signs and what the reference libraries sign', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ minLength: 1, maxLength: 40 }),
        standardSecretArb,
        fc.string({ minLength: 1, maxLength: 1000, unit: 'binary' }),
        async (secret, standardSecret, body) => {
          expect(await signPayloadAsync(body, secret)).toBe(signPayload(body, secret));
          expect(await signPayloadAsync(body, secret)).toBe(await signGithubStyle(secret, body));
          expect(await signStandardAsync(body, standardSecret, 'evt_1', 1_700_000_000)).toBe(
            signStandard(body, standardSecret, 'evt_1', 1_700_000_000),
          );
        },
      ),
      { numRuns: 100 },
    );
    const reference = new Webhook(SECRET);
    const at = new Date(1_700_000_000_000);
    expect(await signStandardAsync('{"a":1}', SECRET, 'evt_x', 1_700_000_000)).toBe(
      reference.sign('evt_x', at, '{"a":1}'),
    );
  });

  it('verifies as the node:crypto functions do, for good, tampered and malformed input', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ maxLength: 300 }),
        fc.option(fc.string({ maxLength: 80 })),
        fc.integer({ min: -1000, max: 1000 }),
        fc.boolean(),
        async (body, garbage, skew, tamper) => {
          const now = 1_700_000_000_000;
          const seconds = 1_700_000_000 + skew;
          const good = signStandard(body, SECRET, 'evt_q', seconds);
          const sig = garbage ?? (tamper ? `${good.slice(0, -3)}AAA=` : good);
          const headers = {
            'webhook-id': 'evt_q',
            'webhook-timestamp': String(seconds),
            'webhook-signature': sig,
          };
          const options = { now: () => now };
          expect(await verifyStandardWebhookAsync(body, headers, SECRET, options)).toBe(
            verifyStandardWebhook(body, headers, SECRET, options),
          );
          const service = garbage ?? (tamper ? signPayload(`${body}x`, SECRET) : signPayload(body, SECRET));
          expect(await verifySignatureAsync(body, service, [`${SECRET}old`, SECRET])).toBe(
            verifySignature(body, service, [`${SECRET}old`, SECRET]),
          );
        },
      ),
      { numRuns: 200 },
    );
    expect(await verifySignatureAsync('x', undefined, SECRET)).toBe(false);
    expect(await verifySignatureAsync('x', ['a', 'b'], SECRET)).toBe(false);
    expect(await verifySignatureAsync('x', signPayload('x', SECRET), [])).toBe(false);
    expect(await verifyStandardWebhookAsync('x', {}, SECRET)).toBe('missing_headers');
  });

  it('a secret that decodes to no key signs nothing and verifies nothing, in both', async () => {
    const at = Math.floor(Date.now() / 1000);
    expect(() => signStandard('x', 'whsec_', 'evt_1', at)).toThrow(TypeError);
    await expect(signStandardAsync('x', 'whsec_=', 'evt_1', at)).rejects.toThrow(TypeError);
    // Node's HMAC takes an empty key; a signature made with one must not pass for such a secret.
    const emptyKeyed = `v1,${createHmac('sha256', Buffer.alloc(0)).update(`evt_1.${at}.x`).digest('base64')}`;
    const headers = {
      'webhook-id': 'evt_1',
      'webhook-timestamp': String(at),
      'webhook-signature': emptyKeyed,
    };
    expect(verifyStandardWebhook('x', headers, 'whsec_')).toBe('invalid_signature');
    expect(await verifyStandardWebhookAsync('x', headers, ['whsec_', 'whsec_*'])).toBe('invalid_signature');
  });

  it('verifyWebhookRequest checks a Fetch API Request as the Node middleware checks a delivery', async () => {
    const body = JSON.stringify({
      id: 'evt_abc',
      event: 'wallet.funded',
      timestamp: '',
      bot_id: 'bot_1',
      data: {},
    });
    const at = Math.floor(Date.now() / 1000);
    const signed = {
      'webhook-id': 'evt_abc',
      'webhook-timestamp': String(at),
      'webhook-signature': signStandard(body, SECRET, 'evt_abc', at),
      'x-service-signature': signPayload(body, SECRET),
    };
    const request = (headers: Record<string, string>, text = body) =>
      new Request('https://bot.example.com/hook', { method: 'POST', headers, body: text });

    const ok = await verifyWebhookRequest(request(signed), SECRET);
    expect(ok).toMatchObject({ ok: true, event: { id: 'evt_abc', event: 'wallet.funded' }, rawBody: body });
    // Tampered body: both signatures fail.
    expect(await verifyWebhookRequest(request(signed, body.replace('funded', 'frozen')), SECRET)).toEqual({
      ok: false,
      reason: 'invalid_signature',
    });
    // A valid Standard signature does not excuse a wrong X-Service-Signature.
    expect(
      await verifyWebhookRequest(
        request({ ...signed, 'x-service-signature': signPayload('other', SECRET) }),
        SECRET,
      ),
    ).toEqual({ ok: false, reason: 'invalid_signature' });
    // Only X-Service-Signature: refused unless the caller accepts deliveries without a timestamp.
    const legacy = { 'x-service-signature': signed['x-service-signature'] };
    expect(await verifyWebhookRequest(request(legacy), SECRET)).toEqual({
      ok: false,
      reason: 'missing_headers',
    });
    expect(
      await verifyWebhookRequest(request(legacy), SECRET, { allowUnsignedTimestamp: true }),
    ).toMatchObject({
      ok: true,
    });
    // A replay an hour later.
    expect(
      await verifyWebhookRequest(request(signed), SECRET, { now: () => Date.now() + 3_600_000 }),
    ).toEqual({
      ok: false,
      reason: 'timestamp_out_of_tolerance',
    });
    // Signed, but not an event.
    const notJson = 'hello';
    const signedText = {
      'webhook-id': 'evt_abc',
      'webhook-timestamp': String(at),
      'webhook-signature': signStandard(notJson, SECRET, 'evt_abc', at),
    };
    expect(await verifyWebhookRequest(request(signedText, notJson), SECRET)).toEqual({
      ok: false,
      reason: 'invalid_json',
    });
  });
});
