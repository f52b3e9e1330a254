import type { FastifyReply, FastifyRequest } from 'fastify';
import { auditRecordNames, listAccountAudit } from '../owners/audit.ts';
import { claimBot, createPairingCode, findUnclaimedBot, listRecentPairingCodes } from '../owners/bots.ts';
import { getMasterGuardrails, updateMasterGuardrails } from '../owners/guardrails.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { flashHolder, putFlash, redirectAfterSave, sessionFlashHolder, takeFlash } from './flash.ts';
import { limitOrderWarning, NOTICES, noticeFlash, parseUsdToCents, tags } from './forms.ts';
import type { SafeHtml } from './html.ts';
import { sessionOf } from './http.ts';
import { ClaimBody, ClaimQuery, CsrfForm, FlashQuery, GuardrailsBody, NoticeFlashQuery } from './schemas.ts';
import {
  claimConfirmView,
  claimFormView,
  claimProblemView,
  guardrailsView,
  newPairingCode,
  pairingView,
} from './views/account.ts';
import { activityView, auditReferences } from './views/activity.ts';
import { flash } from './views/layout.ts';

// Account-level pages: claim a bot, pairing codes, master guardrails, account activity.

export function registerOwnerPages(app: App, ctx: AppContext): void {
  app.get(
    '/claim',
    {
      schema: {
        tags,
        summary: 'Claim a bot (signs in first)',
        querystring: ClaimQuery,
      },
      // Public so that a signed-out owner is sent to sign-in with the token kept for the way back.
      config: { public: true },
    },
    async (request, reply) => {
      const token = request.query.token?.trim() ?? '';
      const session = request.dashboard;
      if (!session) {
        return reply.redirect(
          token ? `/signin?claim_token=${encodeURIComponent(token)}` : '/signin?next=%2Fclaim',
          303,
        );
      }
      if (!token) return reply.page(claimFormView(session.csrfToken));
      const bot = await findUnclaimedBot(ctx, token);
      if (!bot) return reply.page(claimProblemView(true), 410);
      return reply.page(claimConfirmView(session.csrfToken, token, bot));
    },
  );

  app.post(
    '/claim',
    {
      schema: {
        tags,
        summary: 'Claim a bot',
        body: ClaimBody,
      },
    },
    async (request, reply) => {
      const session = sessionOf(request);
      try {
        const result = await claimBot(ctx, session.ownerId, request.body.claim_token ?? '');
        return reply.redirect(`/bots/${result.bot_id}?notice=claimed`, 303);
      } catch (error) {
        if (error instanceof ApiError && error.code === 'invalid_claim_token')
          return reply.page(claimProblemView(true), 400);
        throw error;
      }
    },
  );

  const pairingPage = async (request: FastifyRequest, reply: FastifyReply, fresh?: SafeHtml) => {
    const session = sessionOf(request);
    const recent = await listRecentPairingCodes(ctx, session.ownerId, 10);
    return reply.page(pairingView({ csrf: session.csrfToken, now: ctx.clock.now(), recent, fresh }));
  };

  app.get(
    '/pairing',
    { schema: { tags, summary: 'Pairing codes', querystring: FlashQuery } },
    async (request, reply) => {
      if (!request.query.flash) return pairingPage(request, reply);
      const shown = await takeFlash(ctx, flashHolder(request), request.query.flash);
      if (shown?.kind !== 'pairing_code') {
        return pairingPage(
          request,
          reply,
          flash(
            'info',
            'The code was shown once. If you did not note it, create another one: each code works once, for one hour.',
          ),
        );
      }
      return pairingPage(request, reply, newPairingCode(shown.value, shown.expires_at));
    },
  );

  app.post(
    '/pairing',
    { schema: { tags, summary: 'Create a pairing code', body: CsrfForm } },
    async (request, reply) => {
      const code = await createPairingCode(ctx, sessionOf(request).ownerId);
      // Post/redirect/get: reloading the page that shows the code creates no second code.
      const id = await putFlash(ctx, sessionFlashHolder(sessionOf(request)), {
        kind: 'pairing_code',
        value: code.pairing_code,
        expires_at: code.expires_at,
      });
      return reply.redirect(`/pairing?flash=${id}`, 303);
    },
  );

  const guardrailsPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    status: number,
    top: SafeHtml | string,
    values: Record<string, string | undefined> = {},
  ) => {
    const session = sessionOf(request);
    const guardrails = await getMasterGuardrails(ctx.db, session.ownerId, ctx.clock.now());
    return reply.page(guardrailsView({ csrf: session.csrfToken, guardrails, top, values }), status);
  };

  app.get(
    '/guardrails',
    { schema: { tags, summary: 'Master guardrails', querystring: NoticeFlashQuery } },
    async (request, reply) => {
      let top = noticeFlash(request.query.notice, NOTICES.account);
      if (request.query.flash) {
        const shown = await takeFlash(ctx, flashHolder(request), request.query.flash);
        if (shown?.kind === 'notice') top = flash(shown.level, shown.text);
      }
      return guardrailsPage(request, reply, 200, top);
    },
  );

  app.post(
    '/guardrails',
    {
      schema: {
        tags,
        summary: 'Set master guardrails',
        body: GuardrailsBody,
      },
    },
    async (request, reply) => {
      const input: Record<string, number> = {};
      const limits = {
        per_transaction: ['per_transaction_usd', 100_000_000],
        daily_budget: ['daily_budget_usd', 100_000_000],
        monthly_budget: ['monthly_budget_usd', 1_000_000_000],
      } as const;
      let given = false;
      for (const [name, [field, max]] of Object.entries(limits)) {
        const value = request.body[field]?.trim();
        if (!value) continue;
        given = true;
        const cents = parseUsdToCents(value);
        if (cents === undefined || cents > max) {
          return guardrailsPage(
            request,
            reply,
            400,
            flash(
              'bad',
              `“${value}” is not an amount we can use (dollars, up to $${(max / 100).toLocaleString('en-US')}).`,
            ),
            request.body,
          );
        }
        // Left as the page showed it: not a change (even if the amount changed elsewhere since).
        const shown = request.body[`shown_${field}`]?.trim();
        if (shown && parseUsdToCents(shown) === cents) continue;
        input[`${name}_cents`] = cents;
      }
      const back = request.body.return_to;
      const target = back && /^bot_[a-z2-7]{1,64}$/.test(back) ? `/bots/${back}` : '/guardrails';
      if (Object.keys(input).length === 0) {
        if (!given)
          return guardrailsPage(request, reply, 400, flash('bad', 'Enter at least one amount to change.'));
        return reply.redirect(`${target}?notice=unchanged`, 303);
      }
      await updateMasterGuardrails(ctx, sessionOf(request).ownerId, input);
      // Saved either way; limits out of order (per purchase > per day > per month) get a warning.
      const saved = await getMasterGuardrails(ctx.db, sessionOf(request).ownerId, ctx.clock.now());
      const warning = limitOrderWarning({
        per: Math.round(saved.per_transaction_usd * 100),
        day: Math.round(saved.daily_budget_usd * 100),
        month: Math.round(saved.monthly_budget_usd * 100),
      });
      return redirectAfterSave(ctx, sessionOf(request), reply, target, warning, 'guardrails');
    },
  );

  app.get(
    '/activity',
    { schema: { tags, summary: 'Account activity (audit log)' } },
    async (request, reply) => {
      const session = sessionOf(request);
      const entries = await listAccountAudit(ctx, session.ownerId, 100);
      const names = await auditRecordNames(ctx, session.ownerId, auditReferences(entries));
      return reply.page(activityView(entries, names));
    },
  );
}
