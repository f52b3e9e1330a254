import { type Static, Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import {
  fundBot,
  getBot,
  getMasterGuardrails,
  listAudit,
  listBots,
  listTransactions,
  rotateApiKey,
  rotateWebhookSecret,
  setRail,
  setWalletFrozen,
} from '../owners/service.ts';
import type { AppContext } from '../platform/context.ts';
import { IdParam } from '../platform/schemas.ts';
import { html, type SafeHtml } from './html.ts';
import { botTabs, csrfField, flash, page, pill, postButton, usd, when } from './layout.ts';
import { guardrailsForm } from './ownerPages.ts';
import { auditTable, NOTICES, parseUsdToCents } from './present.ts';
import { partnerWalletSection, postPartnerRail, registerX402Pages, X402_NOTICES } from './x402Pages.ts';

// The overview of the owner's bots and the page of one bot with its actions. Every action calls
// the owner service (which checks ownership, writes the audit log and emits events) and answers a
// redirect back (post/redirect/get), except key rotation, whose new value is shown once.

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));
const BotParams = Type.Object({ bot_id: IdParam('bot') });
type BotParamsT = Static<typeof BotParams>;
const Form = Type.Object({ _csrf: Text(200) });
const MAX_FUND_CENTS = 1_000_000;

type OwnerBot = Awaited<ReturnType<typeof getBot>>;

function sendHtml(reply: FastifyReply, status: number, body: string) {
  return reply.status(status).type('text/html; charset=utf-8').send(body);
}

function webhookHealth(webhook: { status: string; fail_count: number }): SafeHtml {
  const label =
    webhook.status === 'active'
      ? 'healthy'
      : webhook.status === 'pending'
        ? 'not yet delivered'
        : `${webhook.status} (${webhook.fail_count} failed)`;
  return pill(webhook.status, label);
}

export function registerBotPages(app: App, ctx: AppContext): void {
  app.get('/', { schema: { tags, summary: 'Overview of your bots' } }, async (request, reply) => {
    const session = request.dashboard!;
    const { bots } = await listBots(ctx, session.ownerId);
    const pending = bots.reduce((n, b) => n + b.pending_approvals, 0);
    const list = bots.length
      ? html`<ul class="bot-list">${bots.map(
          (b) => html`<li class="card bot-item">
  <div class="spread"><a class="bot-name" href="/bots/${b.bot_id}">${b.bot_name}</a>${pill(b.wallet.status === 'frozen' ? 'frozen' : b.status)}</div>
  ${b.description ? html`<div class="muted small">${b.description}</div>` : ''}
  <dl class="facts">
    <div><dt>Balance</dt><dd>${usd(b.wallet.balance_usd)}</dd></div>
    <div><dt>On hold</dt><dd>${usd(b.wallet.held_usd)}</dd></div>
    <div><dt>Webhook</dt><dd>${webhookHealth(b.webhook)}</dd></div>
    <div><dt>Waiting for you</dt><dd>${b.pending_approvals > 0 ? html`<a href="/approvals">${pill('pending', `${b.pending_approvals} approval${b.pending_approvals === 1 ? '' : 's'}`)}</a>` : ''}${b.pending_topups > 0 ? html` <a href="/approvals">${pill('pending', `${b.pending_topups} top-up request${b.pending_topups === 1 ? '' : 's'}`)}</a>` : ''}${b.pending_approvals + b.pending_topups === 0 ? html`<span class="muted">nothing</span>` : ''}</dd></div>
  </dl></li>`,
        )}</ul>`
      : html`<div class="card empty stack"><h2>No bots yet</h2>
  <p class="muted">When a bot registers with your e-mail address, it gives you a claim link. Or create a pairing code and tell it to your bot.</p>
  <div class="row centered"><a class="button" href="/pairing">Create a pairing code</a><a class="button secondary" href="/claim">I have a claim link</a></div></div>`;
    return sendHtml(
      reply,
      200,
      page({
        title: 'Your bots',
        session,
        nav: 'bots',
        body: html`<div class="spread"><h1>Your bots</h1>${bots.length ? html`<div class="row"><a class="button secondary" href="/claim">Claim a bot</a></div>` : ''}</div>
<p class="lead">${
          bots.length
            ? pending > 0
              ? `${pending} purchase${pending === 1 ? '' : 's'} waiting for your decision.`
              : 'Nothing is waiting for you.'
            : 'Bots you own appear here.'
        }</p>${list}`,
      }),
    );
  });

  const botPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    botId: string,
    options: { status?: number; top?: SafeHtml | string; before?: string | undefined } = {},
  ) => {
    const session = request.dashboard!;
    const bot: OwnerBot = await getBot(ctx, session.ownerId, botId);
    const [guardrails, { transactions }, { entries }] = await Promise.all([
      getMasterGuardrails(ctx.db, session.ownerId, ctx.clock.now()),
      listTransactions(ctx, session.ownerId, botId, 25, options.before),
      listAudit(ctx, session.ownerId, botId, 25),
    ]);
    const csrf = session.csrfToken;
    const base = `/bots/${bot.bot_id}`;
    const frozen = bot.wallet.status === 'frozen';
    const rail = (key: 'card_wallet' | 'partner_wallet') => bot.rails.find((r) => r.rail === key);
    const lastTx = transactions.at(-1);
    const partnerSection = await partnerWalletSection(
      ctx,
      session.ownerId,
      bot.bot_id,
      rail('partner_wallet')?.status ?? 'inactive',
      csrf,
    );
    const body = html`
<p class="small"><a href="/">← All bots</a></p>
<div class="spread"><h1>${bot.bot_name}</h1>${pill(frozen ? 'frozen' : bot.status)}</div>
<p class="lead">${bot.description ?? ''} <code class="small">${bot.bot_id}</code></p>
${botTabs(bot.bot_id, 'overview')}
${options.top ?? ''}
<div class="card"><dl class="facts">
  <div><dt>Balance</dt><dd class="big" data-testid="balance">${usd(bot.wallet.balance_usd)}</dd></div>
  <div><dt>On hold</dt><dd>${usd(bot.wallet.held_usd)}</dd></div>
  <div><dt>Wallet</dt><dd data-testid="wallet-status">${pill(bot.wallet.status)}</dd></div>
  <div><dt>Webhook</dt><dd>${webhookHealth(bot.webhook)}</dd></div>
</dl>
<p class="muted small">Webhooks go to ${
      bot.webhook.callback_url
        ? html`<code>${bot.webhook.callback_url}</code>`
        : html`the managed tunnel <code>${bot.webhook.tunnel_hostname ?? ''}</code>`
    }. ${bot.pending_approvals > 0 ? html`<a href="/approvals">${bot.pending_approvals} purchase(s) are waiting for your approval.</a>` : ''}</p></div>

<div class="grid two">
<section class="card stack" aria-labelledby="fund-h"><h2 id="fund-h">Add funds</h2>
  <form method="post" action="${base}/fund" class="inline-form">${csrfField(csrf)}
    <div class="field"><label for="amount_usd">Amount, $<span class="hint">Up to $10,000 at a time</span></label>
      <input id="amount_usd" name="amount_usd" inputmode="decimal" required maxlength="16" placeholder="25.00"></div>
    <button type="submit">Add funds</button></form></section>

<section class="card stack" aria-labelledby="freeze-h"><h2 id="freeze-h">${frozen ? 'Wallet is frozen' : 'Freeze the wallet'}</h2>
  <p class="muted small">${
    frozen
      ? 'The bot cannot spend anything until you unfreeze it.'
      : 'Stops all spending at once, for example if the bot behaves oddly. You can unfreeze any time.'
  }</p>
  ${
    frozen
      ? postButton(`${base}/unfreeze`, 'Unfreeze wallet', csrf)
      : postButton(`${base}/freeze`, 'Freeze wallet', csrf, { className: 'danger' })
  }</section>
</div>

<section class="card stack" aria-labelledby="rails-h"><h2 id="rails-h">Payment rails</h2>
  <div class="spread"><div><strong>Card wallet</strong> ${pill(rail('card_wallet')?.status ?? 'inactive')}
    <div class="muted small">Purchases with your self-hosted cards.</div></div>
    ${postButton(
      `${base}/rails/card_wallet`,
      rail('card_wallet')?.status === 'active' ? 'Turn off' : 'Turn on',
      csrf,
      {
        className: 'secondary',
        fields: { status: rail('card_wallet')?.status === 'active' ? 'inactive' : 'active' },
      },
    )}</div>
  ${partnerSection}
</section>

<section class="card stack" aria-labelledby="cards-h"><div class="spread"><h2 id="cards-h">Cards</h2><a href="${base}/cards">${bot.cards.length ? 'Manage cards' : 'Add a card'} →</a></div>${
      bot.cards.length
        ? html`<div class="table-wrap"><table><thead><tr><th>Card</th><th>Status</th><th class="num">Per purchase</th><th class="num">Day</th><th class="num">Month</th><th>Approval</th></tr></thead><tbody>${bot.cards.map(
            (c) =>
              html`<tr><td>${String(c.label ?? c.card_id)}</td><td>${pill(String(c.status))}</td><td class="num">${usd(c.guardrails.per_transaction_usd)}</td><td class="num">${usd(c.guardrails.daily_usd)}</td><td class="num">${usd(c.guardrails.monthly_usd)}</td><td>${String(c.approval_mode).replace(/_/g, ' ')}</td></tr>`,
          )}</tbody></table></div>`
        : html`<p class="muted">No cards yet.</p>`
    }</section>

<section class="card stack" aria-labelledby="guard-h"><h2 id="guard-h">Master guardrails</h2>
  <p class="muted small">These limits apply to all your bots together.</p>
  <dl class="facts"><div><dt>Per purchase</dt><dd>${usd(guardrails.per_transaction_usd)}</dd></div>
    <div><dt>Per day</dt><dd>${usd(guardrails.daily_budget_usd)}</dd></div>
    <div><dt>Per month</dt><dd>${usd(guardrails.monthly_budget_usd)}</dd></div>
    <div><dt>Spent today</dt><dd>${usd(guardrails.daily_spent_usd)}</dd></div></dl>
  <details><summary>Change master guardrails</summary>${guardrailsForm(csrf, bot.bot_id)}</details></section>

<section class="card stack" aria-labelledby="keys-h"><h2 id="keys-h">Keys</h2>
  <details><summary>Rotate the API key…</summary>
    <p class="small">The bot's current key stops working immediately. You will see the new key once; give it to your bot.</p>
    ${postButton(`${base}/api-key/rotate`, 'Rotate API key now', csrf, { className: 'danger' })}</details>
  <details><summary>Rotate the webhook secret…</summary>
    <p class="small">New deliveries are signed with the new secret. You will see it once; give it to your bot.</p>
    ${postButton(`${base}/webhook-secret/rotate`, 'Rotate webhook secret now', csrf, { className: 'danger' })}</details>
</section>

<section class="card" aria-labelledby="tx-h"><h2 id="tx-h">Transactions</h2>${
      transactions.length
        ? html`<div class="table-wrap"><table><thead><tr><th>When</th><th>What</th><th class="num">Available</th><th class="num">Held</th></tr></thead><tbody>${transactions.map(
            (t) =>
              html`<tr><td>${when(t.created_at)}</td><td>${t.description ?? t.kind.replace(/_/g, ' ')}</td><td class="num">${t.available_change_usd ? usd(t.available_change_usd) : ''}</td><td class="num">${t.held_change_usd ? usd(t.held_change_usd) : ''}</td></tr>`,
          )}</tbody></table></div>${
            transactions.length === 25 && lastTx
              ? html`<p><a href="${base}?before=${encodeURIComponent(lastTx.created_at)}#tx-h">Older transactions →</a></p>`
              : ''
          }`
        : html`<p class="muted">No money has moved yet.</p>`
    }</section>

<section class="card" aria-labelledby="audit-h"><h2 id="audit-h">Audit log</h2>${auditTable(entries)}</section>`;
    return sendHtml(reply, options.status ?? 200, page({ title: bot.bot_name, session, nav: 'bots', body }));
  };

  registerX402Pages(app, ctx, botPage);

  app.get<{ Params: BotParamsT; Querystring: { notice?: string; before?: string } }>(
    '/bots/:bot_id',
    {
      schema: {
        tags,
        summary: 'One bot: wallet, rails, cards, guardrails, keys, transactions, audit log',
        params: BotParams,
        querystring: Type.Object({
          notice: Text(40),
          before: Type.Optional(Type.String({ format: 'date-time', maxLength: 40 })),
        }),
      },
    },
    async (request, reply) => {
      const text = request.query.notice
        ? (NOTICES[request.query.notice] ?? X402_NOTICES[request.query.notice])
        : undefined;
      return botPage(request, reply, request.params.bot_id, {
        top: text ? flash('ok', text) : '',
        before: request.query.before,
      });
    },
  );

  app.post<{ Params: BotParamsT; Body: { amount_usd?: string } }>(
    '/bots/:bot_id/fund',
    {
      schema: {
        tags,
        summary: 'Add funds',
        params: BotParams,
        body: Type.Object({ amount_usd: Text(30), _csrf: Text(200) }),
      },
    },
    async (request, reply) => {
      const cents = parseUsdToCents(request.body.amount_usd);
      if (cents === undefined || cents < 1 || cents > MAX_FUND_CENTS) {
        return botPage(request, reply, request.params.bot_id, {
          status: 400,
          top: flash('bad', 'Enter an amount between $0.01 and $10,000.00, for example 25 or 25.50.'),
        });
      }
      await fundBot(ctx, request.dashboard!.ownerId, request.params.bot_id, cents);
      return reply.redirect(`/bots/${request.params.bot_id}?notice=funded`, 303);
    },
  );

  for (const [action, frozen] of [
    ['freeze', true],
    ['unfreeze', false],
  ] as const) {
    app.post<{ Params: BotParamsT }>(
      `/bots/:bot_id/${action}`,
      {
        schema: {
          tags,
          summary: frozen ? 'Freeze the wallet' : 'Unfreeze the wallet',
          params: BotParams,
          body: Form,
        },
      },
      async (request, reply) => {
        await setWalletFrozen(ctx, request.dashboard!.ownerId, request.params.bot_id, frozen);
        return reply.redirect(`/bots/${request.params.bot_id}?notice=${frozen ? 'frozen' : 'unfrozen'}`, 303);
      },
    );
  }

  app.post<{
    Params: BotParamsT & { rail_key: 'card_wallet' | 'partner_wallet' };
    Body: { status: 'active' | 'inactive'; address?: string };
  }>(
    '/bots/:bot_id/rails/:rail_key',
    {
      schema: {
        tags,
        summary: 'Turn a payment rail on or off',
        params: Type.Object({
          bot_id: IdParam('bot'),
          rail_key: Type.Union([Type.Literal('card_wallet'), Type.Literal('partner_wallet')]),
        }),
        body: Type.Object({
          status: Type.Union([Type.Literal('active'), Type.Literal('inactive')]),
          address: Text(200),
          _csrf: Text(200),
        }),
      },
    },
    async (request, reply) => {
      const address = request.body.address?.trim() || undefined;
      if (address !== undefined && !/^[\x21-\x7e]{1,200}$/.test(address)) {
        return botPage(request, reply, request.params.bot_id, {
          status: 400,
          top: flash('bad', 'The address may contain only visible characters, without spaces.'),
        });
      }
      const { bot_id: botId, rail_key: railKey } = request.params;
      if (railKey === 'partner_wallet') {
        // The partner wallet's address comes from its key (src/dashboard/x402Pages.ts).
        const r = await postPartnerRail(ctx, request.dashboard!.ownerId, botId, request.body.status);
        if (!r.ok) return botPage(request, reply, botId, { status: r.status, top: flash('bad', r.message) });
        return reply.redirect(
          `/bots/${botId}?notice=${request.body.status === 'active' ? 'x402_on' : 'x402_off'}`,
          303,
        );
      }
      await setRail(ctx, request.dashboard!.ownerId, botId, railKey, request.body.status, address);
      return reply.redirect(`/bots/${botId}?notice=rail`, 303);
    },
  );

  const shownOnce = (title: string, value: string, note: string) =>
    html`<div class="flash info stack" role="status"><strong>${title}</strong>
  <span class="secret" data-testid="secret-value">${value}</span>
  <span class="small">${note} It is shown only now: copy it before you leave this page.</span></div>`;

  app.post<{ Params: BotParamsT }>(
    '/bots/:bot_id/api-key/rotate',
    { schema: { tags, summary: 'Rotate the API key (shown once)', params: BotParams, body: Form } },
    async (request, reply) => {
      const result = await rotateApiKey(ctx, request.dashboard!.ownerId, request.params.bot_id);
      app.botAuthenticator.forgetBot(request.params.bot_id);
      return botPage(request, reply, request.params.bot_id, {
        top: shownOnce('New API key', result.api_key, 'The previous key no longer works.'),
      });
    },
  );

  app.post<{ Params: BotParamsT }>(
    '/bots/:bot_id/webhook-secret/rotate',
    { schema: { tags, summary: 'Rotate the webhook secret (shown once)', params: BotParams, body: Form } },
    async (request, reply) => {
      const result = await rotateWebhookSecret(ctx, request.dashboard!.ownerId, request.params.bot_id);
      return botPage(request, reply, request.params.bot_id, {
        top: shownOnce(
          'New webhook secret',
          result.webhook_secret,
          'Your bot verifies webhook signatures with it.',
        ),
      });
    },
  );
}
