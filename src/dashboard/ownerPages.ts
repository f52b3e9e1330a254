import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import {
  claimBot,
  createPairingCode,
  getMasterGuardrails,
  updateMasterGuardrails,
} from '../owners/service.ts';
import type { AppContext } from '../platform/context.ts';
import { sha256Hex } from '../platform/crypto.ts';
import { maybeOne } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { iso } from '../platform/time.ts';
import { flashHolder, putFlash, takeFlash } from './flash.ts';
import { html, type SafeHtml } from './html.ts';
import {
  copyable,
  csrfField,
  dataTable,
  flash,
  messagePage,
  page,
  pill,
  postButton,
  usd,
  when,
} from './layout.ts';
import { auditNames, auditTable, limitOrderWarning, NOTICES, parseUsdToCents } from './present.ts';

// Account-level pages: claim a bot, pairing codes, master guardrails, account activity.

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));
const NoticeQuery = Type.Object({ notice: Text(40), flash: Text(64) });

function sendHtml(reply: FastifyReply, status: number, body: string) {
  return reply.status(status).type('text/html; charset=utf-8').send(body);
}

function noticeFlash(code: string | undefined): SafeHtml | string {
  const text = code ? NOTICES[code] : undefined;
  return text ? flash('ok', text) : '';
}

function claimProblem(request: FastifyRequest) {
  return messagePage(
    'This claim link is not valid',
    'It was already used, or it was copied incompletely. If your bot is already claimed, you will find it under your bots. Otherwise ask the bot for its claim link again.',
    { session: request.dashboard },
  );
}

export function registerOwnerPages(app: App, ctx: AppContext): void {
  app.get(
    '/claim',
    {
      schema: {
        tags,
        summary: 'Claim a bot (signs in first)',
        querystring: Type.Object({ token: Text(200) }),
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
      if (!token) {
        return sendHtml(
          reply,
          200,
          page({
            title: 'Claim a bot',
            session,
            narrow: true,
            body: html`<div class="card stack"><h1>Claim a bot</h1>
  <p class="lead">Paste the claim token your bot gave you (it starts with <code>svc_claim_</code>), or open the claim link it printed.</p>
  <form method="post" action="/claim">${csrfField(session.csrfToken)}
    <div class="field"><label for="claim_token">Claim token</label><input id="claim_token" name="claim_token" type="text" required maxlength="200" autocomplete="off"></div>
    <button type="submit">Claim</button></form></div>`,
          }),
        );
      }
      const bot = await maybeOne<{
        id: string;
        name: string;
        description: string | null;
        owner_email: string;
        created_at: Date;
      }>(
        ctx.db,
        'SELECT id, name, description, owner_email, created_at FROM bots WHERE claim_token_hash = $1 AND owner_id IS NULL',
        [sha256Hex(token)],
      );
      if (!bot) return sendHtml(reply, 410, claimProblem(request));
      return sendHtml(
        reply,
        200,
        page({
          title: 'Claim a bot',
          session,
          narrow: true,
          body: html`<div class="card stack"><h1>Claim “${bot.name}”?</h1>
  <p class="lead">A bot registered itself and named you as its owner. Claiming makes it yours: you fund its wallet and decide what it may spend.</p>
  <dl class="facts"><div><dt>Bot</dt><dd>${bot.name}</dd></div><div><dt>Registered</dt><dd>${when(iso(bot.created_at))}</dd></div>
  <div><dt>Owner e-mail given</dt><dd>${bot.owner_email}</dd></div>${
    bot.description ? html`<div><dt>Description</dt><dd>${bot.description}</dd></div>` : ''
  }</dl>
  <form method="post" action="/claim">${csrfField(session.csrfToken)}
    <input type="hidden" name="claim_token" value="${token}">
    <div class="row"><button type="submit">Claim this bot</button><a class="button secondary" href="/">Not now</a></div></form></div>`,
        }),
      );
    },
  );

  app.post(
    '/claim',
    {
      schema: {
        tags,
        summary: 'Claim a bot',
        body: Type.Object({ claim_token: Text(200), _csrf: Text(200) }),
      },
    },
    async (request, reply) => {
      const session = request.dashboard!;
      try {
        const result = await claimBot(ctx, session.ownerId, request.body.claim_token ?? '');
        return reply.redirect(`/bots/${result.bot_id}?notice=claimed`, 303);
      } catch (error) {
        if (error instanceof ApiError && error.code === 'invalid_claim_token')
          return sendHtml(reply, 400, claimProblem(request));
        throw error;
      }
    },
  );

  const pairingPage = async (request: FastifyRequest, reply: FastifyReply, fresh?: SafeHtml) => {
    const session = request.dashboard!;
    const recent = await ctx.db.query<{
      created_at: Date;
      expires_at: Date;
      used_at: Date | null;
      bot_id: string | null;
      bot_name: string | null;
    }>(
      `SELECT p.created_at, p.expires_at, p.used_at, b.id AS bot_id, b.name AS bot_name
         FROM pairing_codes p LEFT JOIN bots b ON b.id = p.used_by_bot_id AND b.owner_id = p.owner_id
        WHERE p.owner_id = $1 ORDER BY p.created_at DESC LIMIT 10`,
      [session.ownerId],
    );
    const now = ctx.clock.now();
    const rows = recent.map((r) => {
      const state = r.used_at ? 'used' : new Date(r.expires_at).getTime() <= now ? 'expired' : 'pending';
      return {
        cells: [
          pill(state, state === 'pending' ? 'waiting' : state),
          r.bot_id ? html`<a href="/bots/${r.bot_id}">${r.bot_name}</a>` : html`<span class="muted">—</span>`,
          when(iso(r.created_at)),
        ],
      };
    });
    return sendHtml(
      reply,
      200,
      page({
        title: 'Pairing codes',
        session,
        nav: 'pairing',
        body: html`<h1>Pairing codes</h1>
<p class="lead">A pairing code links a new bot to you straight away, without a claim link. Tell the bot the 6 digits; it sends them when it registers.</p>
${fresh ?? ''}
<div class="card stack"><h2>New code</h2>
  <p class="muted small">A code works once, for one hour. At most 5 codes per hour.</p>
  ${postButton('/pairing', 'Create a pairing code', session.csrfToken)}</div>
<div class="card"><h2>Recent codes</h2>${
          rows.length
            ? dataTable(
                [{ label: 'State', key: true }, { label: 'Bot', key: true }, { label: 'Created' }],
                rows,
              )
            : html`<p class="muted">No codes yet.</p>`
        }</div>`,
      }),
    );
  };

  app.get<{ Querystring: { flash?: string } }>(
    '/pairing',
    { schema: { tags, summary: 'Pairing codes', querystring: Type.Object({ flash: Text(64) }) } },
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
      return pairingPage(
        request,
        reply,
        html`<div class="flash ok stack" role="status"><div>Your pairing code (shown once, valid until ${when(shown.expires_at)}):</div>
  ${copyable(shown.value, { testid: 'pairing-code', big: true })}
  <div class="small">Give it to your bot: it registers with <code>"pairing_code": "${shown.value}"</code>.</div></div>`,
      );
    },
  );

  app.post(
    '/pairing',
    { schema: { tags, summary: 'Create a pairing code', body: Type.Object({ _csrf: Text(200) }) } },
    async (request, reply) => {
      const code = await createPairingCode(ctx, request.dashboard!.ownerId);
      // Post/redirect/get: reloading the page that shows the code creates no second code.
      const id = await putFlash(ctx, flashHolder(request)!, {
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
    const session = request.dashboard!;
    const g = await getMasterGuardrails(ctx.db, session.ownerId, ctx.clock.now());
    return sendHtml(
      reply,
      status,
      page({
        title: 'Guardrails',
        session,
        nav: 'guardrails',
        body: html`<h1>Master guardrails</h1>
<p class="lead">Hard limits on real-money spending across all your bots. Every purchase must fit them, whatever a bot's own limits say.</p>
${top}
<div class="card"><dl class="facts">
  <div><dt>Per purchase</dt><dd data-testid="per-transaction">${usd(g.per_transaction_usd)}</dd></div>
  <div><dt>Per day</dt><dd>${usd(g.daily_budget_usd)}</dd></div>
  <div><dt>Per month</dt><dd>${usd(g.monthly_budget_usd)}</dd></div>
  <div><dt>Spent today / this month</dt><dd>${usd(g.daily_spent_usd)} / ${usd(g.monthly_spent_usd)}</dd></div>
</dl></div>
<div class="card"><h2>Change</h2><p class="muted small">Fill in only what you want to change.</p>${guardrailsForm(
          session.csrfToken,
          undefined,
          values,
          {
            per: g.per_transaction_usd,
            day: g.daily_budget_usd,
            month: g.monthly_budget_usd,
          },
        )}</div>`,
      }),
    );
  };

  app.get(
    '/guardrails',
    { schema: { tags, summary: 'Master guardrails', querystring: NoticeQuery } },
    async (request, reply) => {
      let top = noticeFlash(request.query.notice);
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
        body: Type.Object({
          per_transaction_usd: Text(20),
          daily_budget_usd: Text(20),
          monthly_budget_usd: Text(20),
          return_to: Text(100),
          _csrf: Text(200),
        }),
      },
    },
    async (request, reply) => {
      const input: Record<string, number> = {};
      const limits = {
        per_transaction: ['per_transaction_usd', 100_000_000],
        daily_budget: ['daily_budget_usd', 100_000_000],
        monthly_budget: ['monthly_budget_usd', 1_000_000_000],
      } as const;
      for (const [name, [field, max]] of Object.entries(limits)) {
        const value = request.body[field]?.trim();
        if (!value) continue;
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
        input[`${name}_cents`] = cents;
      }
      if (Object.keys(input).length === 0)
        return guardrailsPage(request, reply, 400, flash('bad', 'Enter at least one amount to change.'));
      await updateMasterGuardrails(ctx, request.dashboard!.ownerId, input);
      const back = request.body.return_to;
      const target = back && /^bot_[a-z2-7]{1,64}$/.test(back) ? `/bots/${back}` : '/guardrails';
      // Saved either way; limits out of order (per purchase > per day > per month) get a warning.
      const saved = await getMasterGuardrails(ctx.db, request.dashboard!.ownerId, ctx.clock.now());
      const warning = limitOrderWarning({
        per: Math.round(saved.per_transaction_usd * 100),
        day: Math.round(saved.daily_budget_usd * 100),
        month: Math.round(saved.monthly_budget_usd * 100),
      });
      if (warning) {
        const id = await putFlash(ctx, flashHolder(request)!, {
          kind: 'notice',
          level: 'warn',
          text: warning,
        });
        return reply.redirect(`${target}?flash=${id}`, 303);
      }
      return reply.redirect(`${target}?notice=guardrails`, 303);
    },
  );

  app.get(
    '/activity',
    { schema: { tags, summary: 'Account activity (audit log)' } },
    async (request, reply) => {
      const session = request.dashboard!;
      const rows = await ctx.db.query<{
        action: string;
        details: unknown;
        created_at: Date;
        bot_name: string | null;
        bot_id: string | null;
      }>(
        `SELECT a.action, a.details, a.created_at, b.name AS bot_name, b.id AS bot_id
         FROM audit_log a LEFT JOIN bots b ON b.id = a.bot_id AND b.owner_id = a.owner_id
        WHERE a.owner_id = $1 ORDER BY a.created_at DESC, a.id DESC LIMIT 100`,
        [session.ownerId],
      );
      return sendHtml(
        reply,
        200,
        page({
          title: 'Activity',
          session,
          nav: 'activity',
          body: html`<h1>Activity</h1><p class="lead">Everything done in your account, newest first.</p>
<div class="card">${auditTable(
            rows.map((r) => ({ ...r, created_at: iso(r.created_at) })),
            { showBot: true, names: await auditNames(ctx, session.ownerId, rows) },
          )}</div>`,
        }),
      );
    },
  );
}

/** The master guardrails form (on the guardrails page, and on a bot page with return_to = the bot). */
export function guardrailsForm(
  csrf: string,
  returnTo?: string,
  values: Record<string, string | undefined> = {},
  current?: { per: number; day: number; month: number },
): SafeHtml {
  const field = (name: string, label: string, hint: string, limit: 'per' | 'day' | 'month', max: number) =>
    html`<div class="field"><label for="${name}">${label}<span class="hint">${hint}</span></label>
      <input id="${name}" name="${name}" type="number" min="0" max="${max}" step="0.01" inputmode="decimal" placeholder="unchanged" data-limit="${limit}"${
        current ? html` data-current="${current[limit]}"` : ''
      } value="${values[name] ?? ''}"></div>`;
  return html`<form method="post" action="/guardrails" class="stack" data-limits>${csrfField(csrf)}
  ${returnTo ? html`<input type="hidden" name="return_to" value="${returnTo}">` : ''}
  <div class="grid three">
    ${field('per_transaction_usd', 'Per purchase, $', 'Largest single real purchase', 'per', 1_000_000)}
    ${field('daily_budget_usd', 'Per day, $', 'All bots together, UTC day', 'day', 1_000_000)}
    ${field('monthly_budget_usd', 'Per month, $', 'All bots together, UTC month', 'month', 10_000_000)}
  </div>
  <p class="limit-warning" role="status" hidden></p>
  <div><button type="submit">Save guardrails</button></div></form>`;
}
