import cookie from '@fastify/cookie';
import formbody from '@fastify/formbody';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { pendingApprovalCount } from '../checkout/inbox.ts';
import type { AppContext } from '../platform/context.ts';
import { randomHex } from '../platform/crypto.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { registerApprovalPages } from './approvalPages.ts';
import { type AssetName, bundleAsset } from './assets/bundle.ts';
import { registerAuthPages } from './authPages.ts';
import { registerBotPages } from './botPages.ts';
import { registerCardPages } from './cardPages.ts';
import { tags } from './forms.ts';
import { html } from './html.ts';
import { notFoundPage, securityHeaders, sendPage } from './http.ts';
import { registerOwnerPages } from './ownerPages.ts';
import { registerSchedulePages } from './schedulePages.ts';
import {
  csrfMatches,
  type DashboardSession,
  isSecureBaseUrl,
  loadSession,
  preSessionCookieName,
  preSessionCsrfToken,
  sessionCookieName,
} from './sessions.ts';
import { registerTokenPages } from './tokenPages.ts';
import { messageView, type PageView } from './views/layout.ts';
import { registerWebhookPages } from './webhookPages.ts';

// The owner dashboard: server-rendered pages in one encapsulated scope (form parsing, HTML error
// pages, security headers and CSRF checks apply to them only), plus the session authenticator for
// the JSON owner API.

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const PRE_SESSION_MAX_AGE_S = 86_400;

declare module 'fastify' {
  interface FastifyRequest {
    /** The signed-in owner's dashboard session, when the session cookie is valid. */
    dashboard?: DashboardSession;
    /** Random id of the pre-session cookie that binds sign-in forms (login CSRF). */
    preSessionId?: string;
  }
  interface FastifyContextConfig {
    /** Dashboard route reachable without a session (its forms use the pre-session CSRF token). */
    public?: boolean;
  }
}

/** Static files: path → built file (src/dashboard/assets/) and its type; cached an hour by browsers. */
const ASSETS: Array<{ path: string; name: AssetName; type: string; summary: string }> = [
  { path: '/assets/dashboard.css', name: 'dashboard.css', type: 'text/css', summary: 'Dashboard stylesheet' },
  {
    path: '/assets/dashboard.js',
    name: 'dashboard',
    type: 'text/javascript',
    summary: 'Dashboard page script',
  },
  {
    path: '/assets/countdown.js',
    name: 'countdown',
    type: 'text/javascript',
    summary: 'Approvals countdown script',
  },
  {
    path: '/assets/card-wizard.js',
    name: 'cardWizard',
    type: 'text/javascript',
    summary: 'Card wizard script',
  },
];

export async function registerDashboardRoutes(app: App, ctx: AppContext): Promise<void> {
  await app.register(cookie);
  const sessionCookie = sessionCookieName(ctx.config);
  const preCookie = preSessionCookieName(ctx.config);
  const secure = isSecureBaseUrl(ctx.config);
  const expectedOrigin = new URL(ctx.config.baseUrl).origin;
  const aliases = loopbackAliases(ctx.config.baseUrl);

  // JSON owner API with the session cookie (a page's own script): state-changing calls must send
  // the page's CSRF token in X-CSRF-Token. A bearer token takes precedence and needs none.
  app.ownerAuthenticators.push(async (request) => {
    if (request.headers.authorization !== undefined) return undefined;
    const raw = app.parseCookie(request.headers.cookie ?? '')[sessionCookie];
    const session = await loadSession(ctx, raw);
    if (!session) return undefined;
    if (
      !SAFE_METHODS.has(request.method) &&
      !csrfMatches(session.csrfToken, request.headers['x-csrf-token'])
    ) {
      throw new ApiError('csrf_failed', 'Send the CSRF token of your session in the X-CSRF-Token header.');
    }
    return { id: session.ownerId, email: session.email, via: 'session' as const };
  });

  await app.register(async (scope) => {
    // Only dashboard routes parse url-encoded forms: a cross-site form cannot reach the JSON API.
    // And they take nothing else: a JSON body is a 415 (JSON goes to the owner API, whose bodies
    // are closed to unknown fields; the forms' schemas are not, for the browsers' sake).
    scope.removeContentTypeParser(['application/json', 'text/plain']);
    await scope.register(formbody, { bodyLimit: 16_384 });
    // The one page renderer: every dashboard page is a view sent with reply.page(view, status).
    scope.decorateReply('page', function (this: FastifyReply, view: PageView, status = 200) {
      return sendPage(this, view, this.request.dashboard, status);
    });

    scope.addHook('onRequest', async (request, reply) => {
      securityHeaders(reply);
      if (isStatic(request.url)) return; // static: no session lookup
      // Development on BASE_URL=http://localhost:PORT: the same page opened as 127.0.0.1 or [::1]
      // would set its cookies on another host and post from another origin, so send it to BASE_URL.
      if (aliases && SAFE_METHODS.has(request.method)) {
        const host = request.headers.host?.toLowerCase();
        if (host && aliases.has(host)) return reply.redirect(`${expectedOrigin}${request.url}`, 307);
      }
      const session = await loadSession(ctx, request.cookies[sessionCookie]);
      if (session) {
        request.dashboard = session;
        // The navigation's count of what waits in the approvals inbox: for posts too, since a
        // refused form is shown again as a page and its badge must not vanish (one count query).
        session.pendingApprovals = await pendingApprovalCount(ctx, session.ownerId);
      }
      const pre = request.cookies[preCookie];
      if (pre && /^[0-9a-f]{32}$/.test(pre)) request.preSessionId = pre;
    });

    scope.addHook('preHandler', async (request, reply) => {
      const isPublic = request.routeOptions.config.public === true;
      if (SAFE_METHODS.has(request.method)) {
        // Static files set no cookie: a stylesheet or icon fetched alongside a sign-in form must not
        // replace the pre-sign-in cookie that form's CSRF token is bound to.
        if (isStatic(request.url)) return;
        if (isPublic && !request.preSessionId) {
          request.preSessionId = randomHex(16);
          reply.setCookie(preCookie, request.preSessionId, {
            path: '/',
            httpOnly: true,
            sameSite: 'lax',
            secure,
            maxAge: PRE_SESSION_MAX_AGE_S,
          });
        }
        if (!isPublic && !request.dashboard) {
          const next = request.url.length <= 500 ? request.url : '/';
          return reply.redirect(next === '/' ? '/signin' : `/signin?next=${encodeURIComponent(next)}`, 303);
        }
        return;
      }
      // State-changing: the form must come from our own pages.
      const origin = request.headers.origin;
      if (typeof origin === 'string' && origin !== expectedOrigin && !aliases?.has(originHost(origin))) {
        if (origin === 'null') return refuseForm(request, reply);
        return refuseForeignOrigin(reply, origin, expectedOrigin);
      }
      const given = (request.body as Record<string, unknown> | undefined)?._csrf;
      if (isPublic) {
        if (!request.preSessionId || !csrfMatches(preSessionCsrfToken(ctx, request.preSessionId), given))
          return refuseForm(request, reply);
        return;
      }
      if (!request.dashboard) {
        return reply.page(
          messageView('Please sign in again', 'Your session has ended. Sign in and try once more.'),
          401,
        );
      }
      if (!csrfMatches(request.dashboard.csrfToken, given)) return refuseForm(request, reply);
    });

    scope.setErrorHandler((error: FastifyError, request, reply) => {
      const session = request.dashboard;
      const send = (status: number, title: string, text: string) =>
        reply.page(messageView(title, text, { signedIn: session !== undefined }), status);
      if (error instanceof ApiError) {
        if (error.code === 'not_found' || error.status === 404) return notFoundPage(reply, session);
        if (error.code === 'rate_limited') {
          const retry = Number(error.details.retry_after_seconds ?? 60);
          reply.header('retry-after', String(retry));
          return send(429, 'Slow down a little', `${error.message} (in about ${Math.ceil(retry / 60)} min).`);
        }
        if (error.status === 503) return send(503, 'Try again shortly', error.message);
        return send(error.status, 'That did not work', error.message);
      }
      // A mistyped address (/bots/bot_oops) is a page that does not exist, not a form to correct.
      if (error.validation && error.validationContext === 'params') return notFoundPage(reply, session);
      if (error.validation && error.validationContext === 'querystring') {
        return send(400, 'That address is not right', 'Check the link or go back to the page you came from.');
      }
      if (error.validation) {
        return send(400, 'Something in the form was not right', 'Go back, check the values and try again.');
      }
      if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
        return send(413, 'Too much data', 'The form is too large.');
      if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE')
        return send(415, 'Unsupported form', 'Send the form from the dashboard page.');
      if (typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 500) {
        return send(error.statusCode, 'That did not work', 'The request was not understood.');
      }
      request.log.error({ err: error }, 'dashboard error');
      return send(
        500,
        'Something went wrong',
        `Please try again. If it keeps happening, quote request ${request.id}.`,
      );
    });

    for (const asset of ASSETS) {
      scope.get(
        asset.path,
        { schema: { tags, summary: asset.summary }, config: { public: true } },
        async (_request, reply) =>
          reply
            .type(`${asset.type}; charset=utf-8`)
            .header('cache-control', 'public, max-age=3600')
            .send(await bundleAsset(asset.name)),
      );
    }

    for (const path of ['/favicon.svg', '/favicon.ico']) {
      scope.get(
        path,
        { schema: { tags: ['dashboard'], summary: 'Dashboard icon', hide: true }, config: { public: true } },
        async (_request, reply) =>
          reply.type('image/svg+xml').header('cache-control', 'public, max-age=86400').send(FAVICON_SVG),
      );
    }

    const scoped = scope as unknown as App;
    registerAuthPages(scoped, ctx);
    registerOwnerPages(scoped, ctx);
    registerBotPages(scoped, ctx);
    registerCardPages(scoped, ctx);
    registerApprovalPages(scoped, ctx);
    registerWebhookPages(scoped, ctx);
    registerSchedulePages(scoped, ctx);
    registerTokenPages(scoped, ctx);
  });
}

function isStatic(url: string): boolean {
  return url.startsWith('/assets/') || url.startsWith('/favicon.');
}

function refuseForm(request: FastifyRequest, reply: FastifyReply) {
  return reply.page(
    messageView(
      'This form has expired',
      'For your safety the form was refused: it is too old or did not come from this site. Go back, reload the page and try again.',
      { signedIn: request.dashboard !== undefined },
    ),
    403,
  );
}

/** The brand mark ($ on the brand colour) as the browser tab's icon. */
export const FAVICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="8" fill="#3b5bdb"/><text x="16" y="23" font-family="system-ui,sans-serif" font-size="20" font-weight="700" fill="#fff" text-anchor="middle">$</text></svg>';

/**
 * The HTML 404 for paths no route has (outside the dashboard's scope): it looks the session up
 * itself, so a signed-in owner keeps the header, navigation and sign-out on the page.
 */
export async function htmlNotFound(ctx: AppContext, request: FastifyRequest, reply: FastifyReply) {
  securityHeaders(reply);
  const session = await loadSession(ctx, request.cookies?.[sessionCookieName(ctx.config)]).catch(
    () => undefined,
  );
  if (session) session.pendingApprovals = await pendingApprovalCount(ctx, session.ownerId).catch(() => 0);
  return notFoundPage(reply, session);
}

/**
 * `host:port` spellings of the same loopback address as a development BASE_URL (localhost,
 * 127.0.0.1, [::1], same port), other than BASE_URL's own; undefined when BASE_URL is not on loopback.
 */
export function loopbackAliases(baseUrl: string): Set<string> | undefined {
  const url = new URL(baseUrl);
  const names = ['localhost', '127.0.0.1', '[::1]'];
  if (!names.includes(url.hostname)) return undefined;
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  const own = url.host;
  const all = names.flatMap((n) => [`${n}:${port}`, ...(url.port ? [] : [n])]);
  return new Set(all.filter((h) => h !== own));
}

function originHost(origin: string): string {
  try {
    return new URL(origin).host;
  } catch {
    return '';
  }
}

/** A form posted from another origin: say which address was used and which one is right. */
function refuseForeignOrigin(reply: FastifyReply, origin: string, expected: string) {
  return reply.page(
    messageView(
      'Wrong address for this service',
      `This form was sent from ${origin}, but this service's address is ${expected} (its BASE_URL). For your safety forms are accepted only from that address. Open ${expected} and try again; if ${origin} is the right address, set BASE_URL to it and restart the service.`,
      { actions: html`<a class="button" href="${expected}/">Open ${expected}</a>` },
    ),
    403,
  );
}
