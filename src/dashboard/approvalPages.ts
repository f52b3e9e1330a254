import type { Static } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { listApprovals } from '../checkout/decisions.ts';
import { decideByOwner } from '../spend/holds.ts';
import { findOneClickTarget, listRecentDecisions, type OneClickTarget } from '../checkout/inbox.ts';
import { type OneClickDecision, oneClickPurpose } from '../notifications/ownerMail.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { microsToUsd } from '../platform/money.ts';
import { listOwnerTopups, NOTE_MAX } from '../topups/service.ts';
import { flashHolder, putFlash, takeFlash } from './flash.ts';
import { NOTICES, noticeFlash, tags } from './forms.ts';
import type { SafeHtml } from './html.ts';
import { notFoundPage, sessionOf } from './http.ts';
import { setWalletFrozen } from '../owners/funding.ts';
import {
  BotParams,
  ConfirmationParams,
  CsrfForm,
  DecisionParams,
  FlashQuery,
  NoticeQuery,
  OneClickBody,
  OneClickQuery,
} from './schemas.ts';
import { preSessionCsrfToken } from './sessions.ts';
import { verifyLink } from './signedLinks.ts';
import { registerTopupPages } from './topupPages.ts';
import { inboxView, OUTCOME_WORDS, oneClickMessageView, oneClickView } from './views/approvals.ts';
import { flash, usd } from './views/layout.ts';

// The approvals inbox (held purchases of all the owner's bots, with a countdown to expiry) and the
// one-click approve/deny pages reached from the e-mail. Deciding calls decideByOwner, which decides
// a confirmation once (409 not_pending afterwards) and writes the audit log.

/** The inbox page, with a message on top (a notice, or why a decision changed nothing). */
export type Inbox = (
  request: FastifyRequest,
  reply: FastifyReply,
  options?: { status?: number; top?: SafeHtml | string },
) => Promise<unknown>;

interface LinkProblem {
  status: number;
  title: string;
  problem: string;
}

export function registerApprovalPages(app: App, ctx: AppContext): void {
  const inbox: Inbox = async (request, reply, options = {}) => {
    const session = sessionOf(request);
    const [{ approvals, bursts }, decided, { topup_requests: topups }] = await Promise.all([
      listApprovals(ctx, session.ownerId),
      listRecentDecisions(ctx, session.ownerId, 20),
      listOwnerTopups(ctx, session.ownerId, { status: 'pending' }),
    ]);
    const view = inboxView({
      csrf: session.csrfToken,
      now: ctx.clock.now(),
      approvals,
      bursts,
      decided,
      topups,
      noteMax: NOTE_MAX,
      top: options.top ?? '',
    });
    return reply.page(view, options.status ?? 200);
  };

  app.get(
    '/approvals',
    {
      schema: {
        tags,
        summary: 'Approvals inbox: held purchases of all your bots',
        querystring: NoticeQuery,
      },
    },
    async (request, reply) =>
      inbox(request, reply, { top: noticeFlash(request.query.notice, NOTICES.approvals) }),
  );

  for (const decision of ['approve', 'deny'] as const) {
    app.post(
      `/approvals/:confirmation_id/${decision}`,
      {
        schema: {
          tags,
          summary: decision === 'approve' ? 'Approve a held purchase' : 'Deny a held purchase',
          params: ConfirmationParams,
          body: CsrfForm,
        },
      },
      async (request, reply) => {
        try {
          await decideByOwner(ctx, sessionOf(request).ownerId, request.params.confirmation_id, decision);
        } catch (err) {
          if (err instanceof ApiError && err.code === 'not_pending') {
            const status = String(err.details.status ?? 'decided');
            return inbox(request, reply, {
              status: 409,
              top: flash(
                'bad',
                `This purchase was already ${status === 'expired' ? 'expired: its time to decide ran out' : status}, so nothing changed.`,
              ),
            });
          }
          throw err;
        }
        return reply.redirect(`/approvals?notice=${decision === 'approve' ? 'approved' : 'denied'}`, 303);
      },
    );
  }

  // A burst of purchases the owner did not expect (a stolen key probing the payment profiles, say):
  // deny every purchase of that bot still waiting, and freeze its wallet, in one step.
  app.post(
    '/approvals/bots/:bot_id/deny-all-and-freeze',
    {
      schema: {
        tags,
        summary: 'Deny every held purchase of a bot and freeze its wallet',
        params: BotParams,
        body: CsrfForm,
      },
    },
    async (request, reply) => {
      const ownerId = sessionOf(request).ownerId;
      const botId = request.params.bot_id;
      // Freezing first checks that the bot is the owner's (404 otherwise) and stops new purchases.
      await setWalletFrozen(ctx, ownerId, botId, true);
      const { approvals } = await listApprovals(ctx, ownerId);
      for (const a of approvals.filter((x) => x.bot_id === botId)) {
        await decideByOwner(ctx, ownerId, a.confirmation_id, 'deny').catch((err: unknown) => {
          // Decided or expired meanwhile: nothing is left to deny.
          if (!(err instanceof ApiError && err.code === 'not_pending')) throw err;
        });
      }
      return reply.redirect('/approvals?notice=denied_all', 303);
    },
  );

  // One-click links from the approval e-mail. Public: the signature is the authority (the link
  // names one confirmation and its owner). A signed-in *other* owner is refused.
  const linkTarget = async (
    request: FastifyRequest,
    decision: OneClickDecision,
    query: Static<typeof OneClickQuery>,
  ): Promise<LinkProblem | { target: OneClickTarget }> => {
    const s = query.s;
    const invalid = {
      status: 400,
      title: 'This link is not valid',
      problem: 'It may have been copied incompletely. Open the approvals inbox to decide instead.',
    };
    if (typeof s !== 'string' || !/^chk_[a-z2-7]{1,64}$/.test(s)) return invalid;
    const target = await findOneClickTarget(ctx, s);
    if (!target) return invalid;
    const verified = verifyLink(ctx, oneClickPurpose(decision, target.owner_id), query);
    if (verified.state === 'invalid' || verified.subject !== target.id) return invalid;
    if (request.dashboard && request.dashboard.ownerId !== target.owner_id) {
      return {
        status: 404,
        title: 'Not found',
        problem: 'There is nothing here, or it belongs to another account.',
      };
    }
    if (target.status !== 'pending') {
      return {
        status: 410,
        title: 'This link was already used',
        problem: `The purchase of ${target.item_name} at ${target.merchant_name} is already ${OUTCOME_WORDS[target.status]?.toLowerCase() ?? target.status}. Nothing more to do.`,
      };
    }
    if (
      verified.state === 'expired' ||
      (target.expires_at && new Date(target.expires_at).getTime() <= ctx.clock.now())
    ) {
      return {
        status: 410,
        title: 'This link has expired',
        problem:
          'The time to decide this purchase ran out, so it expires and nothing is paid. The bot can ask again.',
      };
    }
    return { target };
  };

  const problemPage = (reply: FastifyReply, p: LinkProblem) =>
    reply.page(oneClickMessageView(p.title, p.problem), p.status);

  app.get(
    '/approvals/one-click/:decision',
    {
      schema: {
        tags,
        summary: 'One-click approve or deny from the e-mail: a confirmation page (the POST decides)',
        params: DecisionParams,
        querystring: OneClickQuery,
      },
      config: { public: true },
    },
    async (request, reply) => {
      const { decision } = request.params;
      const found = await linkTarget(request, decision, request.query);
      if (!('target' in found)) return problemPage(reply, found);
      return reply.page(
        oneClickView({
          decision,
          target: found.target,
          now: ctx.clock.now(),
          csrf: preSessionCsrfToken(ctx, request.preSessionId ?? ''),
          link: request.query,
        }),
      );
    },
  );

  app.post(
    '/approvals/one-click/:decision',
    {
      schema: {
        tags,
        summary: 'One-click approve or deny: decide (signed link, single use)',
        params: DecisionParams,
        body: OneClickBody,
      },
      config: { public: true },
    },
    async (request, reply) => {
      const { decision } = request.params;
      const found = await linkTarget(request, decision, request.body);
      if (!('target' in found)) return problemPage(reply, found);
      const t = found.target;
      try {
        await decideByOwner(ctx, t.owner_id, t.id, decision);
      } catch (err) {
        if (err instanceof ApiError && err.code === 'not_pending') {
          const again = await linkTarget(request, decision, request.body);
          return problemPage(
            reply,
            'target' in again
              ? { status: 409, title: 'This link was already used', problem: err.message }
              : again,
          );
        }
        if (err instanceof ApiError && err.status === 404) return notFoundPage(reply, request.dashboard);
        throw err;
      }
      const approved = decision === 'approve';
      // Post/redirect/get: the outcome is shown by a GET, so reloading it decides nothing again.
      const amount = usd(microsToUsd(t.amount_micros));
      const outcome = {
        kind: 'decided' as const,
        title: approved ? 'Purchase approved' : 'Purchase denied',
        text: approved
          ? `${t.bot_name} may now buy ${t.item_name} at ${t.merchant_name} for ${amount}.`
          : `${t.bot_name} will not buy ${t.item_name}. The held ${amount} is back in its wallet.`,
      };
      const holder = flashHolder(request);
      const id = holder ? await putFlash(ctx, holder, outcome) : undefined;
      return reply.redirect(`/approvals/one-click/done${id ? `?flash=${id}` : ''}`, 303);
    },
  );

  app.get(
    '/approvals/one-click/done',
    {
      schema: {
        tags,
        summary: 'One-click approve or deny: the outcome (after the redirect)',
        querystring: FlashQuery,
      },
      config: { public: true },
    },
    async (request, reply) => {
      const shown = await takeFlash(ctx, flashHolder(request), request.query.flash);
      const outcome =
        shown?.kind === 'decided'
          ? shown
          : {
              title: 'Decision recorded',
              text: 'Your decision was recorded. The approvals inbox shows every purchase and how it was decided.',
            };
      return reply.page(oneClickMessageView(outcome.title, outcome.text));
    },
  );

  registerTopupPages(app, ctx, inbox);
}
