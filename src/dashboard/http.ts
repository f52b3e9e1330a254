import type { FastifyReply, FastifyRequest } from 'fastify';
import { authenticationRequired } from '../platform/errors.ts';
import type { DashboardSession } from './sessions.ts';
import { notFoundView, type PageView, page } from './views/layout.ts';

// The dashboard's HTTP pieces that pages and the app share, with no routes of their own (so no
// page imports routes.ts): the one page renderer, the security headers, the 404 page, and the
// small request checks.

declare module 'fastify' {
  interface FastifyReply {
    /**
     * Sends a view as a whole HTML page (the shell for the request's session around it). Registered
     * in the dashboard's scope (src/dashboard/routes.ts); the only way dashboard pages answer HTML.
     */
    page(view: PageView, status?: number): FastifyReply;
  }
}

// Scripts are the shared page script (/assets/dashboard.js: local and relative times, copy
// buttons, limit warnings), the approvals countdown (/assets/countdown.js, progressive enhancement)
// and the card wizard (/assets/card-wizard.js, which calls the owner API of this origin), served
// from this origin with the stylesheet (/assets/dashboard.css); no inline scripts or styles.
export const CSP =
  "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

export function securityHeaders(reply: FastifyReply): void {
  reply.header('content-security-policy', CSP);
  reply.header('x-frame-options', 'DENY');
  reply.header('x-content-type-options', 'nosniff');
  // same-origin, not no-referrer: with no-referrer browsers send `Origin: null` on form posts.
  reply.header('referrer-policy', 'same-origin');
  reply.header('cache-control', 'no-store');
}

/** The renderer behind `reply.page` (also used outside the dashboard's scope, for the 404). */
export function sendPage(
  reply: FastifyReply,
  view: PageView,
  session: DashboardSession | undefined,
  status = 200,
): FastifyReply {
  return reply.status(status).type('text/html; charset=utf-8').send(page(view, session).value);
}

/** The friendly 404 page (used for unknown paths and for records that are not the owner's). */
export function notFoundPage(reply: FastifyReply, session?: DashboardSession): FastifyReply {
  return sendPage(reply, notFoundView(session !== undefined), session, 404);
}

/**
 * The signed-in owner's session. The dashboard scope sends a request without one to sign-in
 * before any non-public page runs (src/dashboard/routes.ts), so a 401 here means a public page
 * asked for a session it does not have.
 */
export function sessionOf(request: FastifyRequest): DashboardSession {
  if (!request.dashboard) throw authenticationRequired();
  return request.dashboard;
}

/** HTML pages send the HTML 404; API clients keep the JSON error. */
export function wantsHtml(request: FastifyRequest): boolean {
  if (request.url.startsWith('/api/')) return false;
  const accept = request.headers.accept;
  return typeof accept === 'string' && accept.includes('text/html');
}

/** Path-only targets after sign-in (never another origin). */
export function safeReturnPath(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 500) return undefined;
  return /^\/(?![/\\])[^\s\\]*$/.test(value) ? value : undefined;
}
