import { sign, verify } from '@octokit/webhooks-methods';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { signPayload, verifySignature } from '../src/webhooks/verify.ts';

// Cross-checked with an independent implementation of the same scheme (GitHub's sha256= HMAC).

const SECRET = `whsec_${'0f'.repeat(24)}`;

describe('verifySignature', () => {
  it('accepts exactly what @octokit/webhooks-methods signs, and octokit accepts what we sign', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ minLength: 1, maxLength: 40 }),
        fc.string({ minLength: 1, maxLength: 2000, unit: 'binary' }),
        async (secret, body) => {
          const theirs = await sign(secret, body);
          expect(verifySignature(body, theirs, secret)).toBe(true);
          expect(verifySignature(Buffer.from(body, 'utf8'), theirs, secret)).toBe(true);
          expect(signPayload(body, secret)).toBe(theirs);
          expect(await verify(secret, body, signPayload(body, secret))).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('rejects any change to the body, the secret or the signature', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ minLength: 1, maxLength: 300 }), fc.nat(), async (body, n) => {
        const header = await sign(SECRET, body);
        const i = n % body.length;
        const changed = body.slice(0, i) + String.fromCharCode(body.charCodeAt(i) ^ 1) + body.slice(i + 1);
        expect(verifySignature(changed, header, SECRET)).toBe(false);
        expect(verifySignature(body, header, `${SECRET}x`)).toBe(false);
        const hex = header.slice(7);
        const j = 7 + (n % 64);
        const flipped = header.slice(0, j) + (header[j] === '0' ? '1' : '0') + header.slice(j + 1);
        expect(verifySignature(body, flipped, SECRET)).toBe(false);
        expect(hex).toHaveLength(64);
      }),
      { numRuns: 200 },
    );
  });

  it('rejects missing, repeated and malformed headers', async () => {
    const body = '{"event":"wallet.funded"}';
    const good = await sign(SECRET, body);
    const hex = good.slice(7);
    for (const header of [
      undefined,
      null,
      '',
      'sha256=',
      hex,
      `sha1=${hex}`,
      `SHA256=${hex}`,
      `sha256=${hex.slice(0, 63)}`,
      `sha256=${hex}0`,
      `sha256=${hex.slice(0, 63)}g`,
      `sha256= ${hex}`,
      `${good},${good}`,
      [good],
      [good, good],
    ]) {
      expect(verifySignature(body, header as string | undefined, SECRET), String(header)).toBe(false);
    }
    expect(verifySignature(body, good.toUpperCase().replace('SHA256=', 'sha256='), SECRET)).toBe(true);
    expect(verifySignature(body, good, '')).toBe(false);
  });

  it('accepts any of several secrets (rotation)', async () => {
    const body = '{"id":"evt_1"}';
    const header = await sign('whsec_new', body);
    expect(verifySignature(body, header, ['whsec_old', 'whsec_new'])).toBe(true);
    expect(verifySignature(body, header, ['whsec_old'])).toBe(false);
    expect(verifySignature(body, header, [])).toBe(false);
  });
});
