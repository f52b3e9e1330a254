import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import { createNamedOwnerToken, listOwnerTokens, revokeOwnerToken } from '../owners/tokens.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import { html, type SafeHtml } from './html.ts';
import { csrfField, flash, page, postButton, when } from './layout.ts';
import { isSecureBaseUrl } from './sessions.ts';

// Settings: the owner's API tokens. A new token is shown once, after a redirect (post/redirect/get):
// the POST stores it in a short-lived cookie encrypted under SECRET_KEY and bound to the session,
// the GET that follows shows it and clears the cookie, so reloading neither shows it again nor
// creates another.

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));
const FLASH_MAX_AGE_S = 120;

function flashCookieName(ctx: AppContext): string {
  return isSecureBaseUrl(ctx.config) ? '__Host-botpay_new_token' : 'botpay_new_token';
}

function sendHtml(reply: FastifyReply, status: number, body: string) {
  return reply.status(status).type('text/html; charset=utf-8').send(body);
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
    const session = request.dashboard!;
    const tokens = await listOwnerTokens(ctx.db, session.ownerId);
    // One block per token rather than a table: name, prefix and dates stay readable at phone width.
    const rows = tokens.map(
      (
        t,
      ) => html`<div class="spread" data-testid="token-row"><div><strong>${t.name || 'unnamed'}</strong> <code>${t.token_prefix}…</code>
        <div class="small muted">Created ${when(t.created_at)} · last used ${t.last_used_at ? when(t.last_used_at) : 'never'}</div></div>
        ${postButton(`/settings/tokens/${t.token_id}/revoke`, 'Revoke', session.csrfToken, { className: 'danger' })}</div>`,
    );
    return sendHtml(
      reply,
      status,
      page({
        title: 'Settings',
        session,
        nav: 'settings',
        body: html`<h1>Settings</h1>
${top}
<div class="card stack"><h2>Owner API tokens</h2>
  <p class="muted small">A token lets a program act as you through the owner API (<code>Authorization: Bearer svc_owner_…</code>): claim and fund bots, add cards, approve purchases. Only a hash is stored: a token is shown once, when it is created. Revoke a token you no longer use or may have leaked; it stops working at once.</p>
  ${rows.length ? html`<div class="stack">${rows}</div>` : html`<p class="muted">No active tokens.</p>`}
  <form method="post" action="/settings/tokens" class="stack">${csrfField(session.csrfToken)}
    <div class="field"><label for="token-name">Name of a new token</label><input id="token-name" name="name" type="text" required maxlength="100" placeholder="e.g. laptop, backup script" value="${typedName}" autocomplete="off"></div>
    <button type="submit">Create token</button></form></div>`,
      }),
    );
  };

  app.get(
    '/settings',
    {
      schema: { tags, summary: 'Settings: owner API tokens', querystring: Type.Object({ notice: Text(40) }) },
    },
    async (request, reply) => {
      const session = request.dashboard!;
      let top: SafeHtml | string = '';
      const raw = request.cookies[cookieName];
      if (raw !== undefined) {
        // Shown once: the cookie is cleared by this very response.
        reply.clearCookie(cookieName, cookieOptions);
        try {
          const fresh = JSON.parse(ctx.secrets.decrypt(raw)) as { s: string; n: string; t: string };
          if (fresh.s === session.idHash) {
            top = html`<div class="flash ok stack" role="status"><div>Your new token “${fresh.n}”. Copy it now: it is shown only this once.</div>
  <div><code data-testid="new-token">${fresh.t}</code></div>
  <div class="small">Programs send it in the header <code>Authorization: Bearer svc_owner_…</code>. If you lose it, revoke it and create another.</div></div>`;
          }
        } catch {
          // Tampered, or encrypted under another key: show nothing.
        }
      }
      const notice = request.query.notice;
      if (!top && notice === 'revoked')
        top = flash('ok', 'Token revoked. Programs that used it are refused from now on.');
      return settingsPage(request, reply, 200, top);
    },
  );

  app.post(
    '/settings/tokens',
    {
      schema: {
        tags,
        summary: 'Create an owner API token',
        body: Type.Object({ name: Text(200), _csrf: Text(200) }),
      },
    },
    async (request, reply) => {
      const session = request.dashboard!;
      const name = (request.body as { name?: string }).name ?? '';
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

  app.post<{ Params: { token_id: string } }>(
    '/settings/tokens/:token_id/revoke',
    {
      schema: {
        tags,
        summary: 'Revoke an owner API token',
        params: Type.Object({ token_id: Type.String({ maxLength: 80 }) }),
        body: Type.Object({ _csrf: Text(200) }),
      },
    },
    async (request, reply) => {
      // Unknown, revoked or another owner's token: the dashboard's 404 page.
      await revokeOwnerToken(ctx, request.dashboard!.ownerId, request.params.token_id);
      return reply.redirect('/settings?notice=revoked', 303);
    },
  );
}
