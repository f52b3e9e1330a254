import { type Static, Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import { decideByOwner, listApprovals } from '../checkout/decisions.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { centsToUsd } from '../platform/money.ts';
import { IdParam } from '../platform/schemas.ts';
import { iso } from '../platform/time.ts';
import { html, type SafeHtml } from './html.ts';
import {
  csrfField,
  dataTable,
  flash,
  messageBody,
  messagePage,
  page,
  pill,
  postButton,
  usd,
  when,
} from './layout.ts';
import { type OneClickDecision, oneClickPurpose } from '../notifications/ownerMail.ts';
import { flashHolder, putFlash, takeFlash } from './flash.ts';
import { notFoundPage } from './routes.ts';
import { preSessionCsrfToken } from './sessions.ts';
import { verifyLink } from './signedLinks.ts';
import { registerTopupPages, topupSection } from './topupPages.ts';

// The approvals inbox (held purchases of all the owner's bots, with a countdown to expiry) and the
// one-click approve/deny pages reached from the e-mail. Deciding calls decideByOwner, which decides
// a confirmation once (409 not_pending afterwards) and writes the audit log.

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));
const ConfirmationParams = Type.Object({ confirmation_id: IdParam('chk') });
const DecisionParams = Type.Object({
  decision: Type.Union([Type.Literal('approve'), Type.Literal('deny')]),
});
const LinkFields = { s: Text(100), e: Text(20), sig: Text(200) };

const NOTICE: Record<string, string> = {
  approved: 'Purchase approved. The bot receives the card details it needs.',
  denied: 'Purchase denied. The held amount is back in the wallet.',
  topup_approved: 'Top-up approved. The amount is in the bot’s wallet.',
  topup_declined: 'Top-up request declined. The bot is told.',
};

/** Countdown script: turns each `[data-left]` (seconds left when the page was rendered) into a live timer. */
export const COUNTDOWN_JS = `(function () {
  var items = Array.prototype.slice.call(document.querySelectorAll('[data-left]'));
  if (!items.length) return;
  var start = Date.now();
  function tick() {
    var elapsed = (Date.now() - start) / 1000;
    items.forEach(function (el) {
      var left = Math.round(Number(el.getAttribute('data-left')) - elapsed);
      var out = el.querySelector('.countdown');
      if (!out) return;
      if (left <= 0) {
        out.textContent = 'expired (reload the page)';
        el.classList.add('expired');
        var card = el.closest('.approval');
        if (card) card.querySelectorAll('button').forEach(function (b) { b.disabled = true; });
      } else {
        var m = Math.floor(left / 60), s = left % 60;
        out.textContent = m + ':' + (s < 10 ? '0' : '') + s + ' left';
      }
    });
  }
  tick();
  setInterval(tick, 1000);
})();
`;

interface DecidedRow {
  id: string;
  bot_id: string;
  bot_name: string;
  amount_cents: number;
  merchant_name: string;
  item_name: string;
  status: string;
  decided_at: Date | null;
  decided_by: string | null;
  [key: string]: unknown;
}

function sendHtml(reply: FastifyReply, status: number, body: string) {
  return reply.status(status).type('text/html; charset=utf-8').send(body);
}

const DECIDED_BY: Record<string, string> = {
  owner: 'by you',
  system: 'automatically',
  expiry: 'time ran out',
};

const OUTCOME_WORDS: Record<string, string> = {
  approved: 'Approved',
  denied: 'Denied',
  expired: 'Expired (not decided in time)',
};

interface LinkTarget {
  id: string;
  owner_id: string;
  bot_name: string;
  amount_cents: number;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  category: string | null;
  status: string;
  expires_at: Date | null;
  [key: string]: unknown;
}

/**
 * What waits for the owner's decision in the inbox (the navigation badge): real purchases and
 * top-up requests, pending and not yet expired — what the inbox lists.
 */
export async function pendingApprovalCount(ctx: AppContext, ownerId: string): Promise<number> {
  const row = await maybeOne<{ n: number }>(
    ctx.db,
    `SELECT (SELECT count(*) FROM checkout_confirmations c JOIN bots b ON b.id = c.bot_id
              WHERE c.owner_id = $1 AND b.owner_id = $1 AND c.status = 'pending' AND c.is_real
                AND c.expires_at > $2)::int
          + (SELECT count(*) FROM topup_requests t JOIN bots b ON b.id = t.bot_id
              WHERE t.owner_id = $1 AND b.owner_id = $1 AND t.status = 'pending' AND t.expires_at > $2)::int AS n`,
    [ownerId, new Date(ctx.clock.now())],
  );
  return Number(row?.n ?? 0);
}

export function registerApprovalPages(app: App, ctx: AppContext): void {
  app.get(
    '/assets/countdown.js',
    { schema: { tags, summary: 'Approvals countdown script' }, config: { public: true } },
    async (_request, reply) => {
      reply.header('cache-control', 'public, max-age=3600');
      return reply.type('text/javascript; charset=utf-8').send(COUNTDOWN_JS);
    },
  );

  const inbox = async (
    request: FastifyRequest,
    reply: FastifyReply,
    options: { status?: number; top?: SafeHtml | string } = {},
  ) => {
    const session = request.dashboard!;
    const now = ctx.clock.now();
    const { approvals } = await listApprovals(ctx, session.ownerId);
    const decided = await ctx.db.query<DecidedRow>(
      `SELECT c.id, c.bot_id, b.name AS bot_name, c.amount_cents, c.merchant_name, c.item_name, c.status,
              c.decided_at, c.decided_by
         FROM checkout_confirmations c JOIN bots b ON b.id = c.bot_id
        WHERE c.owner_id = $1 AND b.owner_id = $1 AND c.is_real AND c.status <> 'pending'
          AND c.created_at > $2
        ORDER BY c.decided_at DESC NULLS LAST LIMIT 20`,
      [session.ownerId, new Date(now - 7 * 86_400_000)],
    );
    const csrf = session.csrfToken;
    const pending = approvals.length
      ? html`<ul class="approval-list">${approvals.map((a) => {
          const left = Math.max(0, Math.round((new Date(a.expires_at).getTime() - now) / 1000));
          return html`<li class="card approval stack" data-testid="approval" data-confirmation="${a.confirmation_id}">
  <div class="spread"><strong class="big">${usd(a.amount_usd)}</strong>${pill('pending', 'waiting for you')}</div>
  <div><strong>${a.item_name}</strong> at ${a.merchant_name} <span class="muted small">${a.merchant_url}</span></div>
  <div class="muted small">Bot <a href="/bots/${a.bot_id}">${a.bot_name}</a>${a.category ? ` · category ${a.category}` : ''} · asked ${when(a.created_at)}</div>
  <div class="small" data-left="${left}">Expires ${when(a.expires_at)} <span class="countdown pill warn" aria-live="off"></span></div>
  <div class="row">${postButton(`/approvals/${a.confirmation_id}/approve`, 'Approve', csrf)}${postButton(
    `/approvals/${a.confirmation_id}/deny`,
    'Deny',
    csrf,
    { className: 'danger' },
  )}</div></li>`;
        })}</ul>`
      : html`<div class="card empty"><p class="muted">No purchase is waiting for your decision.</p></div>`;
    // Key facts first (amount and outcome), so a phone shows them on the first line of each entry.
    const history = decided.length
      ? dataTable(
          [
            { label: 'Amount', num: true, key: true },
            { label: 'Outcome', key: true },
            { label: 'What' },
            { label: 'Bot' },
            { label: 'Decided' },
          ],
          decided.map((d) => ({
            attrs: { 'data-testid': 'decided', 'data-confirmation': d.id },
            cells: [
              usd(centsToUsd(Number(d.amount_cents))),
              pill(d.status, OUTCOME_WORDS[d.status] ?? d.status),
              html`${d.item_name} <span class="muted small">at ${d.merchant_name}</span>`,
              html`<a href="/bots/${d.bot_id}">${d.bot_name}</a>`,
              html`${when(d.decided_at ? iso(d.decided_at) : null)}${d.decided_by ? html` <span class="muted small">${DECIDED_BY[d.decided_by] ?? ''}</span>` : ''}`,
            ],
          })),
        )
      : html`<p class="muted">Nothing decided in the last 7 days.</p>`;
    const body = html`<h1>Approvals</h1>
<p class="lead">${
      approvals.length
        ? `${approvals.length} purchase${approvals.length === 1 ? '' : 's'} waiting for your decision. A purchase you do not decide in time expires and nothing is paid.`
        : 'Purchases your bots ask you to approve appear here, and we e-mail you about each.'
    }</p>
${options.top ?? ''}
${pending}
${await topupSection(ctx, session.ownerId, csrf)}
<section class="card" aria-labelledby="decided-h"><h2 id="decided-h">Recently decided</h2>${history}</section>`;
    return sendHtml(
      reply,
      options.status ?? 200,
      page({ title: 'Approvals', session, nav: 'approvals', body, scripts: ['/assets/countdown.js'] }),
    );
  };

  app.get<{ Querystring: { notice?: string } }>(
    '/approvals',
    {
      schema: {
        tags,
        summary: 'Approvals inbox: held purchases of all your bots',
        querystring: Type.Object({ notice: Text(40) }),
      },
    },
    async (request, reply) => {
      const text = request.query.notice ? NOTICE[request.query.notice] : undefined;
      return inbox(request, reply, { top: text ? flash('ok', text) : '' });
    },
  );

  for (const decision of ['approve', 'deny'] as const) {
    app.post<{ Params: Static<typeof ConfirmationParams> }>(
      `/approvals/:confirmation_id/${decision}`,
      {
        schema: {
          tags,
          summary: decision === 'approve' ? 'Approve a held purchase' : 'Deny a held purchase',
          params: ConfirmationParams,
          body: Type.Object({ _csrf: Text(200) }),
        },
      },
      async (request, reply) => {
        try {
          await decideByOwner(ctx, request.dashboard!.ownerId, request.params.confirmation_id, decision);
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

  // One-click links from the approval e-mail. Public: the signature is the authority (the link
  // names one confirmation and its owner). A signed-in *other* owner is refused.
  const linkTarget = async (
    request: FastifyRequest,
    decision: OneClickDecision,
    query: { s?: string; e?: string; sig?: string },
  ): Promise<{ problem: string; status: number; title: string } | { target: LinkTarget }> => {
    const s = query.s;
    const invalid = {
      status: 400,
      title: 'This link is not valid',
      problem: 'It may have been copied incompletely. Open the approvals inbox to decide instead.',
    };
    if (typeof s !== 'string' || !/^chk_[a-z2-7]{1,64}$/.test(s)) return invalid;
    const target = await maybeOne<LinkTarget>(
      ctx.db,
      `SELECT c.id, c.owner_id, b.name AS bot_name, c.amount_cents, c.merchant_name, c.merchant_url,
              c.item_name, c.category, c.status, c.expires_at
         FROM checkout_confirmations c JOIN bots b ON b.id = c.bot_id AND b.owner_id = c.owner_id
        WHERE c.id = $1 AND c.is_real`,
      [s],
    );
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

  const problemPage = (
    request: FastifyRequest,
    reply: FastifyReply,
    p: { status: number; title: string; problem: string },
  ) =>
    sendHtml(
      reply,
      p.status,
      messagePage(p.title, p.problem, {
        session: request.dashboard,
        actions: html`<a class="button" href="/approvals">Open the approvals inbox</a>`,
      }),
    );

  app.get<{ Params: Static<typeof DecisionParams>; Querystring: { s?: string; e?: string; sig?: string } }>(
    '/approvals/one-click/:decision',
    {
      schema: {
        tags,
        summary: 'One-click approve or deny from the e-mail: a confirmation page (the POST decides)',
        params: DecisionParams,
        querystring: Type.Object(LinkFields),
      },
      config: { public: true },
    },
    async (request, reply) => {
      const { decision } = request.params;
      const found = await linkTarget(request, decision, request.query);
      if (!('target' in found)) return problemPage(request, reply, found);
      const t = found.target;
      const approve = decision === 'approve';
      const left = Math.max(0, Math.round((new Date(t.expires_at!).getTime() - ctx.clock.now()) / 1000));
      const body = messageBody(
        approve ? 'Approve this purchase?' : 'Deny this purchase?',
        html`<div class="stack approval"><div class="big">${usd(centsToUsd(Number(t.amount_cents)))}</div>
  <div><strong>${t.item_name}</strong> at ${t.merchant_name} <span class="muted small">${t.merchant_url}</span></div>
  <div class="muted small">Bot ${t.bot_name}${t.category ? ` · category ${t.category}` : ''}</div>
  <div class="small" data-left="${left}">Expires ${when(iso(t.expires_at!))} <span class="countdown pill warn"></span></div></div>`,
        html`<form method="post" action="/approvals/one-click/${decision}">${csrfField(
          preSessionCsrfToken(ctx, request.preSessionId ?? ''),
        )}
  <input type="hidden" name="s" value="${request.query.s ?? ''}"><input type="hidden" name="e" value="${request.query.e ?? ''}"><input type="hidden" name="sig" value="${request.query.sig ?? ''}">
  <div class="row"><button type="submit"${approve ? '' : html` class="danger"`}>${approve ? 'Approve purchase' : 'Deny purchase'}</button>
  <a class="button secondary" href="/approvals">Open the inbox instead</a></div></form>`,
      );
      return sendHtml(
        reply,
        200,
        page({
          title: approve ? 'Approve purchase' : 'Deny purchase',
          narrow: true,
          session: request.dashboard,
          body,
          scripts: ['/assets/countdown.js'],
        }),
      );
    },
  );

  app.post<{ Params: Static<typeof DecisionParams>; Body: { s?: string; e?: string; sig?: string } }>(
    '/approvals/one-click/:decision',
    {
      schema: {
        tags,
        summary: 'One-click approve or deny: decide (signed link, single use)',
        params: DecisionParams,
        body: Type.Object({ ...LinkFields, _csrf: Text(200) }),
      },
      config: { public: true },
    },
    async (request, reply) => {
      const { decision } = request.params;
      const found = await linkTarget(request, decision, request.body);
      if (!('target' in found)) return problemPage(request, reply, found);
      const t = found.target;
      try {
        await decideByOwner(ctx, t.owner_id, t.id, decision);
      } catch (err) {
        if (err instanceof ApiError && err.code === 'not_pending') {
          const again = await linkTarget(request, decision, request.body);
          return problemPage(
            request,
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
      const outcome = {
        kind: 'decided' as const,
        title: approved ? 'Purchase approved' : 'Purchase denied',
        text: approved
          ? `${t.bot_name} may now buy ${t.item_name} at ${t.merchant_name} for ${usd(centsToUsd(Number(t.amount_cents)))}.`
          : `${t.bot_name} will not buy ${t.item_name}. The held ${usd(centsToUsd(Number(t.amount_cents)))} is back in its wallet.`,
      };
      const holder = flashHolder(request);
      const id = holder ? await putFlash(ctx, holder, outcome) : undefined;
      return reply.redirect(`/approvals/one-click/done${id ? `?flash=${id}` : ''}`, 303);
    },
  );

  app.get<{ Querystring: { flash?: string } }>(
    '/approvals/one-click/done',
    {
      schema: {
        tags,
        summary: 'One-click approve or deny: the outcome (after the redirect)',
        querystring: Type.Object({ flash: Text(64) }),
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
      return sendHtml(
        reply,
        200,
        messagePage(outcome.title, outcome.text, {
          session: request.dashboard,
          actions: html`<a class="button" href="/approvals">Open the approvals inbox</a>`,
        }),
      );
    },
  );

  registerTopupPages(app, ctx, inbox);
}
