import type { AppContext } from '../platform/context.ts';
import { constantTimeEqual } from '../platform/crypto.ts';

// Signed one-click links for e-mails (approve / deny a held purchase, in the approvals phase).
// The link names its purpose, the subject (a confirmation id) and its expiry, signed with an HMAC
// under SECRET_KEY, so it cannot be altered or reused for another purpose. Single use comes from
// the subject's own state: deciding a confirmation succeeds only while it is pending, so a second
// click finds it decided and shows the "already used" page. `sig` is redacted in request logs.

export type SignedLinkState = 'valid' | 'expired' | 'invalid';

function payload(purpose: string, subject: string, expiresAtSeconds: number): string {
  return `link:${purpose}:${subject}:${expiresAtSeconds}`;
}

/** Query string `s=…&e=…&sig=…` for a link to `path` that is valid until `expiresAt` (ms). */
export function signLink(ctx: AppContext, purpose: string, subject: string, expiresAt: number): string {
  const e = Math.floor(expiresAt / 1000);
  const sig = ctx.secrets.sign(payload(purpose, subject, e));
  return new URLSearchParams({ s: subject, e: String(e), sig }).toString();
}

export function verifyLink(
  ctx: AppContext,
  purpose: string,
  query: { s?: unknown; e?: unknown; sig?: unknown },
): { state: SignedLinkState; subject?: string } {
  const { s, e, sig } = query;
  if (typeof s !== 'string' || typeof e !== 'string' || typeof sig !== 'string' || !/^\d{1,12}$/.test(e))
    return { state: 'invalid' };
  if (!constantTimeEqual(ctx.secrets.sign(payload(purpose, s, Number(e))), sig)) return { state: 'invalid' };
  if (Number(e) * 1000 <= ctx.clock.now()) return { state: 'expired', subject: s };
  return { state: 'valid', subject: s };
}
