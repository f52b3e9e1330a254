import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../platform/context.ts';
import type { App } from '../platform/http.ts';
import { flashHolder, putFlash, takeFlash } from './flash.ts';
import { tags } from './forms.ts';
import { safeReturnPath, sessionOf } from './http.ts';
import { CsrfForm, FlashQuery, SignInBody, SignInQuery, VerifyBody, VerifyQuery } from './schemas.ts';
import {
  inspectMagicLink,
  isSecureBaseUrl,
  isValidEmail,
  preSessionCsrfToken,
  requestMagicLink,
  SESSION_TTL_MS,
  sessionCookieName,
  signInWithMagicLink,
  signOut,
} from './sessions.ts';
import { checkEmailView, linkProblemView, signInView, verifyView } from './views/auth.ts';
import { flash } from './views/layout.ts';

// Sign-in by e-mail magic link, the confirmation step that uses the link, and sign-out.

function preCsrf(ctx: AppContext, request: FastifyRequest): string {
  return preSessionCsrfToken(ctx, request.preSessionId ?? '');
}

export function registerAuthPages(app: App, ctx: AppContext): void {
  const cookieOptions = {
    path: '/',
    httpOnly: true,
    sameSite: 'lax' as const,
    secure: isSecureBaseUrl(ctx.config),
  };
  const sessionCookie = sessionCookieName(ctx.config);

  app.get(
    '/signin',
    { schema: { tags, summary: 'Sign-in page', querystring: SignInQuery }, config: { public: true } },
    async (request, reply) => {
      const next = request.query.claim_token
        ? `/claim?token=${encodeURIComponent(request.query.claim_token)}`
        : safeReturnPath(request.query.next);
      if (request.dashboard) return reply.redirect(next ?? '/', 303);
      const returnPath = safeReturnPath(request.query.next);
      const notice = request.query.signed_out
        ? flash('ok', 'You are signed out.')
        : request.query.claim_token
          ? flash('info', 'Sign in first; then you come straight back to claim your bot.')
          : undefined;
      return reply.page(
        signInView({
          csrf: preCsrf(ctx, request),
          ...(request.query.claim_token ? { claimToken: request.query.claim_token } : {}),
          ...(returnPath ? { next: returnPath } : {}),
          ...(notice ? { notice } : {}),
        }),
      );
    },
  );

  app.post(
    '/signin',
    { schema: { tags, summary: 'Send a sign-in link', body: SignInBody }, config: { public: true } },
    async (request, reply) => {
      const email = (request.body.email ?? '').trim();
      const next = safeReturnPath(request.body.next);
      const claimToken = request.body.claim_token?.trim() || undefined;
      if (!isValidEmail(email)) {
        return reply.page(
          signInView({
            csrf: preCsrf(ctx, request),
            email,
            ...(next ? { next } : {}),
            ...(claimToken ? { claimToken } : {}),
            notice: flash('bad', 'Enter a complete e-mail address, such as you@example.com.'),
          }),
          400,
        );
      }
      const returnTo = claimToken ? `/claim?token=${encodeURIComponent(claimToken)}` : next;
      await requestMagicLink(ctx, { email, ip: request.ip, returnTo });
      // The check-email page names the address typed, so a typo shows; it travels in a flash
      // bound to this browser (never in the URL, where any link could put any text).
      const holder = flashHolder(request);
      const id = holder ? await putFlash(ctx, holder, { kind: 'check_email', email }) : undefined;
      return reply.redirect(id ? `/signin/check-email?flash=${id}` : '/signin/check-email', 303);
    },
  );

  app.get(
    '/signin/check-email',
    {
      schema: { tags, summary: 'Check-your-mail page', querystring: FlashQuery },
      config: { public: true },
    },
    async (request, reply) => {
      const shown = await takeFlash(ctx, flashHolder(request), request.query.flash);
      const email = shown?.kind === 'check_email' ? shown.email : undefined;
      return reply.page(checkEmailView(email));
    },
  );

  app.get(
    '/signin/verify',
    {
      schema: { tags, summary: 'Confirm a sign-in link', querystring: VerifyQuery },
      config: { public: true },
    },
    async (request, reply) => {
      const token = request.query.token ?? '';
      const state = await inspectMagicLink(ctx, token);
      if (state !== 'valid') {
        const problem = linkProblemView(state);
        return reply.page(problem.view, problem.status);
      }
      return reply.page(verifyView(preCsrf(ctx, request), token));
    },
  );

  app.post(
    '/signin/verify',
    { schema: { tags, summary: 'Use a sign-in link', body: VerifyBody }, config: { public: true } },
    async (request, reply) => {
      const result = await signInWithMagicLink(ctx, request.body.token ?? '', {
        ip: request.ip,
        userAgent: request.headers['user-agent'],
        replacesSessionHash: request.dashboard?.idHash,
      });
      if (!result.ok) {
        const problem = linkProblemView(result.reason);
        return reply.page(problem.view, problem.status);
      }
      reply.setCookie(sessionCookie, result.sessionId, { ...cookieOptions, maxAge: SESSION_TTL_MS / 1000 });
      return reply.redirect(safeReturnPath(result.returnTo) ?? '/', 303);
    },
  );

  app.post('/signout', { schema: { tags, summary: 'Sign out', body: CsrfForm } }, async (request, reply) => {
    await signOut(ctx, sessionOf(request));
    reply.clearCookie(sessionCookie, cookieOptions);
    return reply.redirect('/signin?signed_out=1', 303);
  });
}
