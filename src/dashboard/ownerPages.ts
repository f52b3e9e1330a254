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
import { html, type SafeHtml } from './html.ts';
import { csrfField, flash, messagePage, page, pill, postButton, usd, when } from './layout.ts';
import { auditTable, NOTICES, parseUsdToCents } from './present.ts';

// Account-level pages: claim a bot, pairing codes, master guardrails, account activity.

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));
const NoticeQuery = Type.Object({ notice: Text(40) });

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
      return html`<tr><td>${when(iso(r.created_at))}</td><td>${pill(state, state === 'pending' ? 'waiting' : state)}</td>
        <td>${r.bot_id ? html`<a href="/bots/${r.bot_id}">${r.bot_name}</a>` : html`<span class="muted">—</span>`}</td></tr>`;
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
            ? html`<div class="table-wrap"><table><thead><tr><th>Created</th><th>State</th><th>Bot</th></tr></thead><tbody>${rows}</tbody></table></div>`
            : html`<p class="muted">No codes yet.</p>`
        }</div>`,
      }),
    );
  };

  app.get('/pairing', { schema: { tags, summary: 'Pairing codes' } }, async (request, reply) =>
    pairingPage(request, reply),
  );

  app.post(
    '/pairing',
    { schema: { tags, summary: 'Create a pairing code', body: Type.Object({ _csrf: Text(200) }) } },
    async (request, reply) => {
      const code = await createPairingCode(ctx, request.dashboard!.ownerId);
      return pairingPage(
        request,
        reply,
        html`<div class="flash ok stack" role="status"><div>Your pairing code (shown once, valid until ${when(code.expires_at)}):</div>
  <div class="code-big" data-testid="pairing-code">${code.pairing_code}</div>
  <div class="small">Give it to your bot: it registers with <code>"pairing_code": "${code.pairing_code}"</code>.</div></div>`,
      );
    },
  );

  const guardrailsPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    status: number,
    top: SafeHtml | string,
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
<div class="card"><h2>Change</h2><p class="muted small">Fill in only what you want to change.</p>${guardrailsForm(session.csrfToken)}</div>`,
      }),
    );
  };

  app.get(
    '/guardrails',
    { schema: { tags, summary: 'Master guardrails', querystring: NoticeQuery } },
    async (request, reply) => guardrailsPage(request, reply, 200, noticeFlash(request.query.notice)),
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
          );
        }
        input[`${name}_cents`] = cents;
      }
      if (Object.keys(input).length === 0)
        return guardrailsPage(request, reply, 400, flash('bad', 'Enter at least one amount to change.'));
      await updateMasterGuardrails(ctx, request.dashboard!.ownerId, input);
      const back = request.body.return_to;
      if (back && /^bot_[a-z2-7]{1,64}$/.test(back))
        return reply.redirect(`/bots/${back}?notice=guardrails`, 303);
      return reply.redirect('/guardrails?notice=guardrails', 303);
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
      }>(
        `SELECT a.action, a.details, a.created_at, b.name AS bot_name
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
            { showBot: true },
          )}</div>`,
        }),
      );
    },
  );
}

/** The master guardrails form (on the guardrails page, and on a bot page with return_to = the bot). */
export function guardrailsForm(csrf: string, returnTo?: string): SafeHtml {
  return html`<form method="post" action="/guardrails" class="stack">${csrfField(csrf)}
  ${returnTo ? html`<input type="hidden" name="return_to" value="${returnTo}">` : ''}
  <div class="grid three">
    <div class="field"><label for="per_transaction_usd">Per purchase, $<span class="hint">Largest single real purchase</span></label>
      <input id="per_transaction_usd" name="per_transaction_usd" inputmode="decimal" placeholder="unchanged" maxlength="16"></div>
    <div class="field"><label for="daily_budget_usd">Per day, $<span class="hint">All bots together, UTC day</span></label>
      <input id="daily_budget_usd" name="daily_budget_usd" inputmode="decimal" placeholder="unchanged" maxlength="16"></div>
    <div class="field"><label for="monthly_budget_usd">Per month, $<span class="hint">All bots together, UTC month</span></label>
      <input id="monthly_budget_usd" name="monthly_budget_usd" inputmode="decimal" placeholder="unchanged" maxlength="16"></div>
  </div>
  <div><button type="submit">Save guardrails</button></div></form>`;
}
