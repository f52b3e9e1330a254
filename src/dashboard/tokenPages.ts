import type { FastifyReply, FastifyRequest } from 'fastify';
import { createNamedOwnerToken, listOwnerTokens, revokeOwnerToken } from '../owners/tokens.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { NOTICES, noticeFlash, tags } from './forms.ts';
import type { SafeHtml } from './html.ts';
import { sessionOf } from './http.ts';
import { CsrfForm, NoticeQuery, TokenBody, TokenParams } from './schemas.ts';
import { isSecureBaseUrl } from './sessions.ts';
import { flash } from './views/layout.ts';
import { newTokenNotice, settingsView } from './views/settings.ts';

// Settings: the owner's API tokens. A new token is shown once, after a redirect (post/redirect/get):
// the POST stores it in a short-lived cookie encrypted under SECRET_KEY and bound to the session,
// the GET that follows shows it and clears the cookie, so reloading neither shows it again nor
// creates another.

const FLASH_MAX_AGE_S = 120;

function flashCookieName(ctx: AppContext): string {
  return isSecureBaseUrl(ctx.config) ? '__Host-botpay_new_token' : 'botpay_new_token';
}

export function registerTokenPages(app: App, ctx: AppContext): void {
  const cookieName = flashCookieName(ctx);
  const cookieOptions = {
    path: '/',
    httpOnly: true,
    sameSite: 'strict' as const,
    secure: isSecureBaseUrl(ctx.config),
  };

  const settingsPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    status: number,
    top: SafeHtml | string,
    typedName = '',
  ) => {
    const session = sessionOf(request);
    const tokens = await listOwnerTokens(ctx.db, session.ownerId);
    return reply.page(settingsView({ csrf: session.csrfToken, tokens, top, typedName }), status);
  };

  app.get(
    '/settings',
    {
      schema: { tags, summary: 'Settings: owner API tokens', querystring: NoticeQuery },
    },
    async (request, reply) => {
      const session = sessionOf(request);
      let top: SafeHtml | string = '';
      const raw = request.cookies[cookieName];
      if (raw !== undefined) {
        // Shown once: the cookie is cleared by this very response.
        reply.clearCookie(cookieName, cookieOptions);
        try {
          const fresh = JSON.parse(ctx.secrets.decrypt(raw)) as { s: string; n: string; t: string };
          if (fresh.s === session.idHash) {
            top = newTokenNotice(fresh.n, fresh.t);
          }
        } catch {
          // Tampered, or encrypted under another key: show nothing.
        }
      }
      if (!top) top = noticeFlash(request.query.notice, NOTICES.settings);
      return settingsPage(request, reply, 200, top);
    },
  );

  app.post(
    '/settings/tokens',
    {
      schema: {
        tags,
        summary: 'Create an owner API token',
        body: TokenBody,
      },
    },
    async (request, reply) => {
      const session = sessionOf(request);
      const name = request.body.name ?? '';
      // Control characters would end up in the list and the audit log.
      // biome-ignore lint/suspicious/noControlCharactersInRegex: that is the point
      if (!name.trim() || name.length > 100 || /[\u0000-\u001f\u007f]/.test(name)) {
        return settingsPage(
          request,
          reply,
          400,
          flash(
            'bad',
            'Give the token a name of up to 100 characters (for example the machine that will use it).',
          ),
          name.slice(0, 100),
        );
      }
      let created: Awaited<ReturnType<typeof createNamedOwnerToken>>;
      try {
        created = await createNamedOwnerToken(ctx, session.ownerId, name);
      } catch (error) {
        if (error instanceof ApiError && error.status < 500) {
          return settingsPage(request, reply, error.status, flash('bad', error.message), name);
        }
        throw error;
      }
      reply.setCookie(
        cookieName,
        ctx.secrets.encrypt(JSON.stringify({ s: session.idHash, n: created.name, t: created.token })),
        { ...cookieOptions, maxAge: FLASH_MAX_AGE_S },
      );
      return reply.redirect('/settings', 303);
    },
  );

  app.post(
    '/settings/tokens/:token_id/revoke',
    {
      schema: {
        tags,
        summary: 'Revoke an owner API token',
        params: TokenParams,
        body: CsrfForm,
      },
    },
    async (request, reply) => {
      // Unknown, revoked or another owner's token: the dashboard's 404 page.
      await revokeOwnerToken(ctx, sessionOf(request).ownerId, request.params.token_id);
      return reply.redirect('/settings?notice=revoked', 303);
    },
  );
}
