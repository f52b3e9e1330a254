import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import type { AppContext } from '../platform/context.ts';
import { flashHolder, putFlash, takeFlash } from './flash.ts';
import { html, type SafeHtml } from './html.ts';
import { csrfField, flash, messageBody, messagePage, page } from './layout.ts';
import { safeReturnPath } from './routes.ts';
import {
  inspectMagicLink,
  isSecureBaseUrl,
  isValidEmail,
  type MagicLinkState,
  preSessionCsrfToken,
  requestMagicLink,
  SESSION_TTL_MS,
  sessionCookieName,
  signInWithMagicLink,
  signOut,
} from './sessions.ts';

// Sign-in by e-mail magic link, the confirmation step that uses the link, and sign-out.

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));

const SignInQuery = Type.Object({
  next: Text(500),
  claim_token: Text(200),
  signed_out: Text(5),
});
const SignInBody = Type.Object({
  email: Text(300),
  next: Text(500),
  claim_token: Text(200),
  _csrf: Text(200),
});
const VerifyQuery = Type.Object({ token: Text(200) });
const VerifyBody = Type.Object({ token: Text(200), _csrf: Text(200) });

function preCsrf(ctx: AppContext, request: FastifyRequest): string {
  return preSessionCsrfToken(ctx, request.preSessionId ?? '');
}

function signInForm(
  ctx: AppContext,
  request: FastifyRequest,
  values: { email?: string; next?: string; claimToken?: string; notice?: SafeHtml },
): string {
  const body = html`<div class="card stack">
  <h1>Sign in</h1>
  <p class="lead">Enter your e-mail address and we'll send you a link that signs you in. No password needed.</p>
  ${values.notice ?? ''}
  <form method="post" action="/signin">
    ${csrfField(preCsrf(ctx, request))}
    ${values.next ? html`<input type="hidden" name="next" value="${values.next}">` : ''}
    ${values.claimToken ? html`<input type="hidden" name="claim_token" value="${values.claimToken}">` : ''}
    <div class="field"><label for="email">E-mail address</label>
      <input id="email" name="email" type="email" autocomplete="email" required maxlength="254" value="${values.email ?? ''}"></div>
    <button type="submit">Send me a sign-in link</button>
  </form>
</div>`;
  return page({ title: 'Sign in', narrow: true, body });
}

export function linkProblemPage(state: Exclude<MagicLinkState, 'valid'>): { status: number; body: string } {
  const again = html`<a class="button" href="/signin">Get a new link</a>`;
  if (state === 'expired')
    return {
      status: 410,
      body: messagePage(
        'This link has expired',
        'Sign-in links work for 15 minutes. Ask for a new one; it only takes a moment.',
        { actions: again },
      ),
    };
  if (state === 'used')
    return {
      status: 410,
      body: messagePage(
        'This link was already used',
        'Each sign-in link works once. If you are not signed in, ask for a new link.',
        { actions: again },
      ),
    };
  return {
    status: 400,
    body: messagePage(
      'This link is not valid',
      'The link may be incomplete (some mail apps break long links). Ask for a new one.',
      { actions: again },
    ),
  };
}

function sendHtml(reply: FastifyReply, status: number, body: string) {
  return reply.status(status).type('text/html; charset=utf-8').send(body);
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
      const notice = request.query.signed_out
        ? flash('ok', 'You are signed out.')
        : request.query.claim_token
          ? flash('info', 'Sign in first; then you come straight back to claim your bot.')
          : undefined;
      return sendHtml(
        reply,
        200,
        signInForm(ctx, request, {
          ...(request.query.claim_token ? { claimToken: request.query.claim_token } : {}),
          ...(safeReturnPath(request.query.next) ? { next: safeReturnPath(request.query.next)! } : {}),
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
        return sendHtml(
          reply,
          400,
          signInForm(ctx, request, {
            email,
            ...(next ? { next } : {}),
            ...(claimToken ? { claimToken } : {}),
            notice: flash('bad', 'Enter a complete e-mail address, such as you@example.com.'),
          }),
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
      schema: { tags, summary: 'Check-your-mail page', querystring: Type.Object({ flash: Text(64) }) },
      config: { public: true },
    },
    async (request, reply) => {
      const shown = await takeFlash(ctx, flashHolder(request), request.query.flash);
      const email = shown?.kind === 'check_email' ? shown.email : undefined;
      return sendHtml(
        reply,
        200,
        page({
          title: 'Check your e-mail',
          narrow: true,
          body: messageBody(
            'Check your e-mail',
            html`We sent a sign-in link to ${email ? html`<strong data-testid="sent-to">${email}</strong>` : 'the address you gave'}. Open it on this device or any other; it works once, for 15 minutes.
              <br><span class="small">Nothing arrived after a few minutes? Check the spam folder${email ? ' and the spelling of the address above' : ' or the spelling of the address'}.</span>`,
            html`<a class="button secondary" href="/signin">Use another address</a>`,
          ),
        }),
      );
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
        const problem = linkProblemPage(state);
        return sendHtml(reply, problem.status, problem.body);
      }
      // Using the link takes a button press: mail scanners that fetch links must not burn it.
      return sendHtml(
        reply,
        200,
        page({
          title: 'Sign in',
          narrow: true,
          body: messageBody(
            'Welcome back',
            'Press the button to finish signing in on this device.',
            html`<form method="post" action="/signin/verify">${csrfField(preCsrf(ctx, request))}
              <input type="hidden" name="token" value="${token}">
              <button type="submit">Sign in</button></form>`,
          ),
        }),
      );
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
        const problem = linkProblemPage(result.reason);
        return sendHtml(reply, problem.status, problem.body);
      }
      reply.setCookie(sessionCookie, result.sessionId, { ...cookieOptions, maxAge: SESSION_TTL_MS / 1000 });
      return reply.redirect(safeReturnPath(result.returnTo) ?? '/', 303);
    },
  );

  app.post(
    '/signout',
    { schema: { tags, summary: 'Sign out', body: Type.Object({ _csrf: Text(200) }) } },
    async (request, reply) => {
      await signOut(ctx, request.dashboard!);
      reply.clearCookie(sessionCookie, cookieOptions);
      return reply.redirect('/signin?signed_out=1', 303);
    },
  );
}
