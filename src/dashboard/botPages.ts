import { type Static, Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import {
  fundBot,
  getBot,
  getMasterGuardrails,
  listAudit,
  listBots,
  rotateApiKey,
  rotateWebhookSecret,
  setRail,
  setWalletFrozen,
} from '../owners/service.ts';
import type { AppContext } from '../platform/context.ts';
import { centsToUsd } from '../platform/money.ts';
import { IdParam } from '../platform/schemas.ts';
import { iso } from '../platform/time.ts';
import { MONEY_KINDS } from '../wallet/ledger.ts';
import { flashHolder, putFlash, takeFlash } from './flash.ts';
import { html, type SafeHtml } from './html.ts';
import {
  botTabs,
  copyable,
  csrfField,
  dataTable,
  flash,
  page,
  pill,
  postButton,
  usd,
  when,
} from './layout.ts';
import { guardrailsForm } from './ownerPages.ts';
import { APPROVAL_WORDS, auditNames, auditTable, NOTICES, parseUsdToCents } from './present.ts';
import { partnerWalletSection, postPartnerRail, registerX402Pages, X402_NOTICES } from './x402Pages.ts';

// The overview of the owner's bots and the page of one bot with its actions. Every action calls
// the owner service (which checks ownership, writes the audit log and emits events) and answers a
// redirect back (post/redirect/get). A rotated key or secret is shown once through a flash
// (src/dashboard/flash.ts) that the page after the redirect consumes: reloading it rotates nothing
// and shows the value no more.

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

const TX_WORDS: Record<string, string> = {
  funding: 'Added funds',
  purchase: 'Bought',
  hold: 'Held for your approval',
  capture: 'Approved and paid',
  release: 'Hold released',
};

interface TxRow {
  id: string;
  kind: string;
  description: string | null;
  created_at: Date;
  available: number;
  held: number;
  balance_after: number;
  item_name: string | null;
  merchant_name: string | null;
  confirmation_status: string | null;
  [key: string]: unknown;
}

/**
 * The bot's money movements, newest first, with what was bought (the purchase the ledger
 * transaction references) and the available balance after each. The balance is the running sum of
 * every movement of the available account in one statement, so it agrees with the wallet.
 */
async function moneyMovements(ctx: AppContext, botId: string, limit: number, before?: string) {
  return ctx.db.query<TxRow>(
    `WITH moves AS (
       SELECT t.id, t.kind, t.reference, t.description, t.created_at,
              coalesce(sum(e.amount_cents) FILTER (WHERE e.account = 'wallet_available'), 0)::bigint AS available,
              coalesce(sum(e.amount_cents) FILTER (WHERE e.account = 'wallet_held'), 0)::bigint AS held
         FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
        WHERE t.bot_id = $1 AND e.account IN ('wallet_available', 'wallet_held')
        GROUP BY t.id),
     running AS (
       SELECT m.*, (sum(m.available) OVER (ORDER BY m.created_at, m.id ROWS UNBOUNDED PRECEDING))::bigint AS balance_after
         FROM moves m)
     SELECT r.id, r.kind, r.description, r.created_at, r.available, r.held, r.balance_after,
            c.item_name, c.merchant_name, c.status AS confirmation_status
       FROM running r LEFT JOIN checkout_confirmations c ON c.id = r.reference AND c.bot_id = $1
      WHERE r.kind = ANY($4::text[]) AND ($3::timestamptz IS NULL OR r.created_at < $3)
      ORDER BY r.created_at DESC, r.id DESC LIMIT $2`,
    [botId, limit, before ? new Date(before) : null, MONEY_KINDS],
  );
}

function txWhat(t: TxRow): SafeHtml {
  const words = TX_WORDS[t.kind] ?? t.description ?? t.kind.replace(/_/g, ' ');
  if (!t.item_name) return html`${words}`;
  return html`<strong>${t.item_name}</strong> <span class="muted">at ${t.merchant_name ?? ''}</span><br><span class="small muted">${words}</span>`;
}

function shownOnce(title: string, value: string, note: string): SafeHtml {
  return html`<div class="flash info stack" role="status"><strong>${title}</strong>
  ${copyable(value, { testid: 'secret-value' })}
  <span class="small">${note} It is shown only now: copy it before you leave this page. Reloading the page does not show it again.</span></div>`;
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
              ? html`<a href="/approvals" data-testid="waiting-link">${pending} purchase${pending === 1 ? '' : 's'} waiting for your decision →</a>`
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
    options: {
      status?: number;
      top?: SafeHtml | string;
      before?: string | undefined;
      /** Typed values to keep after an error (form field name → text). */
      values?: Record<string, string | undefined>;
    } = {},
  ) => {
    const session = request.dashboard!;
    const bot: OwnerBot = await getBot(ctx, session.ownerId, botId);
    const [guardrails, transactions, { entries }] = await Promise.all([
      getMasterGuardrails(ctx.db, session.ownerId, ctx.clock.now()),
      moneyMovements(ctx, botId, 25, options.before),
      listAudit(ctx, session.ownerId, botId, 25),
    ]);
    const values = options.values ?? {};
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
    }. ${bot.pending_approvals > 0 ? html`<a href="/approvals">${bot.pending_approvals} purchase${bot.pending_approvals === 1 ? ' is' : 's are'} waiting for your approval →</a>` : ''}</p></div>

<div class="grid two">
<section class="card stack" aria-labelledby="fund-h"><h2 id="fund-h">Add funds</h2>
  <form method="post" action="${base}/fund" class="inline-form">${csrfField(csrf)}
    <div class="field"><label for="amount_usd">Amount, $<span class="hint">Up to $10,000 at a time</span></label>
      <input id="amount_usd" name="amount_usd" type="number" min="0.01" max="10000" step="0.01" inputmode="decimal" required placeholder="25.00" value="${values.amount_usd ?? ''}"${values.amount_usd !== undefined ? html` aria-invalid="true"` : ''}></div>
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
        ? dataTable(
            [
              { label: 'Card', key: true },
              { label: 'Status', key: true },
              { label: 'Per purchase', num: true },
              { label: 'Day', num: true },
              { label: 'Month', num: true },
              { label: 'Approval' },
            ],
            bot.cards.map((c) => ({
              cells: [
                html`<a href="${base}/cards/${String(c.card_id)}">${String(c.label ?? c.card_id)}</a>`,
                pill(String(c.status)),
                usd(c.guardrails.per_transaction_usd),
                usd(c.guardrails.daily_usd),
                usd(c.guardrails.monthly_usd),
                APPROVAL_WORDS[String(c.approval_mode)] ?? String(c.approval_mode).replace(/_/g, ' '),
              ],
            })),
          )
        : html`<p class="muted">No cards yet.</p>`
    }</section>

<section class="card stack" aria-labelledby="guard-h"><h2 id="guard-h">Master guardrails</h2>
  <p class="muted small">These limits apply to all your bots together.</p>
  <dl class="facts"><div><dt>Per purchase</dt><dd>${usd(guardrails.per_transaction_usd)}</dd></div>
    <div><dt>Per day</dt><dd>${usd(guardrails.daily_budget_usd)}</dd></div>
    <div><dt>Per month</dt><dd>${usd(guardrails.monthly_budget_usd)}</dd></div>
    <div><dt>Spent today</dt><dd>${usd(guardrails.daily_spent_usd)}</dd></div></dl>
  <details><summary>Change master guardrails</summary>${guardrailsForm(
    csrf,
    bot.bot_id,
    {},
    {
      per: guardrails.per_transaction_usd,
      day: guardrails.daily_budget_usd,
      month: guardrails.monthly_budget_usd,
    },
  )}</details></section>

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
        ? html`${dataTable(
            [
              { label: 'What', key: true },
              { label: 'Amount', num: true, key: true },
              { label: 'Balance after', num: true },
              { label: 'Held change', num: true },
              { label: 'When' },
            ],
            transactions.map((t) => {
              const available = Number(t.available);
              const held = Number(t.held);
              return {
                attrs: { 'data-testid': 'transaction' },
                cells: [
                  txWhat(t),
                  available !== 0
                    ? `${available > 0 ? '+' : ''}${usd(centsToUsd(available))}`
                    : html`<span class="muted">${usd(centsToUsd(held))} from hold</span>`,
                  html`<span data-testid="balance-after">${usd(centsToUsd(Number(t.balance_after)))}</span>`,
                  held ? `${held > 0 ? '+' : ''}${usd(centsToUsd(held))}` : '',
                  when(iso(t.created_at)),
                ],
              };
            }),
          )}${
            transactions.length === 25 && lastTx
              ? html`<p><a href="${base}?before=${encodeURIComponent(iso(lastTx.created_at))}#tx-h">Older transactions →</a></p>`
              : ''
          }`
        : html`<p class="muted">No money has moved yet.</p>`
    }</section>

<section class="card" aria-labelledby="audit-h"><h2 id="audit-h">Audit log</h2>${auditTable(entries, { names: await auditNames(ctx, session.ownerId, entries) })}</section>`;
    return sendHtml(reply, options.status ?? 200, page({ title: bot.bot_name, session, nav: 'bots', body }));
  };

  registerX402Pages(app, ctx, botPage);

  app.get<{ Params: BotParamsT; Querystring: { notice?: string; before?: string; flash?: string } }>(
    '/bots/:bot_id',
    {
      schema: {
        tags,
        summary: 'One bot: wallet, rails, cards, guardrails, keys, transactions, audit log',
        params: BotParams,
        querystring: Type.Object({
          notice: Text(40),
          flash: Text(64),
          before: Type.Optional(Type.String({ format: 'date-time', maxLength: 40 })),
        }),
      },
    },
    async (request, reply) => {
      const botId = request.params.bot_id;
      const text = request.query.notice
        ? (NOTICES[request.query.notice] ?? X402_NOTICES[request.query.notice])
        : undefined;
      let top: SafeHtml | string = text ? flash('ok', text) : '';
      if (request.query.flash) {
        // The one-time value of a rotation: shown by this view only (taking it deletes it).
        const shown = await takeFlash(ctx, flashHolder(request), request.query.flash);
        if (shown?.kind === 'notice') {
          top = flash(shown.level, shown.text);
        } else if (
          shown &&
          (shown.kind === 'api_key' || shown.kind === 'webhook_secret') &&
          shown.bot_id === botId
        ) {
          top =
            shown.kind === 'api_key'
              ? shownOnce('New API key', shown.value, 'The previous key no longer works.')
              : shownOnce('New webhook secret', shown.value, 'Your bot verifies webhook signatures with it.');
        } else {
          top = flash(
            'info',
            'The new value was shown once and cannot be shown again. If you did not copy it, rotate again: only the newest one works.',
          );
        }
      }
      return botPage(request, reply, botId, { top, before: request.query.before });
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
          values: { amount_usd: request.body.amount_usd ?? '' },
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

  // Rotations answer a redirect (post/redirect/get): the new value travels in a one-time flash,
  // so reloading the page that shows it neither rotates again nor shows it twice.
  app.post<{ Params: BotParamsT }>(
    '/bots/:bot_id/api-key/rotate',
    { schema: { tags, summary: 'Rotate the API key (shown once)', params: BotParams, body: Form } },
    async (request, reply) => {
      const botId = request.params.bot_id;
      const result = await rotateApiKey(ctx, request.dashboard!.ownerId, botId);
      app.botAuthenticator.forgetBot(botId);
      const id = await putFlash(ctx, flashHolder(request)!, {
        kind: 'api_key',
        bot_id: botId,
        value: result.api_key,
      });
      return reply.redirect(`/bots/${botId}?flash=${id}`, 303);
    },
  );

  app.post<{ Params: BotParamsT }>(
    '/bots/:bot_id/webhook-secret/rotate',
    { schema: { tags, summary: 'Rotate the webhook secret (shown once)', params: BotParams, body: Form } },
    async (request, reply) => {
      const botId = request.params.bot_id;
      const result = await rotateWebhookSecret(ctx, request.dashboard!.ownerId, botId);
      const id = await putFlash(ctx, flashHolder(request)!, {
        kind: 'webhook_secret',
        bot_id: botId,
        value: result.webhook_secret,
      });
      return reply.redirect(`/bots/${botId}?flash=${id}`, 303);
    },
  );
}
