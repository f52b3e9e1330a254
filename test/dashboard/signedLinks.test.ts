import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/platform/clock.ts';
import type { AppContext } from '../../src/platform/context.ts';
import { createSecretBox } from '../../src/platform/crypto.ts';
import { signLink, verifyLink } from '../../src/dashboard/signedLinks.ts';

// Pure functions: a context with only the clock and the secret box they use.
const clock = new FakeClock();
const ctx = { clock, secrets: createSecretBox('k'.repeat(40)) } as unknown as AppContext;
const parse = (q: string) => Object.fromEntries(new URLSearchParams(q));

describe('signed one-click links', () => {
  it('verify until they expire, for their purpose and subject only', () => {
    const q = parse(signLink(ctx, 'approve', 'chk_abc', clock.now() + 900_000));
    expect(verifyLink(ctx, 'approve', q)).toEqual({ state: 'valid', subject: 'chk_abc' });
    expect(verifyLink(ctx, 'deny', q).state).toBe('invalid');
    expect(verifyLink(ctx, 'approve', { ...q, s: 'chk_other' }).state).toBe('invalid');
    expect(verifyLink(ctx, 'approve', { ...q, e: String(Number(q.e) + 3600) }).state).toBe('invalid');
    expect(verifyLink(ctx, 'approve', { ...q, sig: undefined }).state).toBe('invalid');
    const other = { ...ctx, secrets: createSecretBox('j'.repeat(40)) } as AppContext;
    expect(verifyLink(other, 'approve', q).state).toBe('invalid');
    clock.advance(900_000);
    expect(verifyLink(ctx, 'approve', q)).toEqual({ state: 'expired', subject: 'chk_abc' });
  });
});
