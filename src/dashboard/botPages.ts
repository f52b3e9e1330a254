import type { FastifyReply, FastifyRequest } from 'fastify';
import { auditRecordNames, listAudit } from '../owners/audit.ts';
import { getBot, listBots } from '../owners/bots.ts';
import { fundBot, listMoneyMovements, setRail, setWalletFrozen } from '../owners/funding.ts';
import { getMasterGuardrails } from '../owners/guardrails.ts';
import { rotateApiKey, rotateWebhookSecret } from '../owners/keys.ts';
import type { AppContext } from '../platform/context.ts';
import { randomHex } from '../platform/crypto.ts';
import type { App } from '../platform/http.ts';
import { flashHolder, putFlash, sessionFlashHolder, takeFlash } from './flash.ts';
import { NOTICES, noticeFlash, parseUsdToCents, tags } from './forms.ts';
import type { SafeHtml } from './html.ts';
import { sessionOf } from './http.ts';
import { BotParams, BotQuery, CsrfForm as Form, FundBody, RailBody, RailParams } from './schemas.ts';
import { auditReferences } from './views/activity.ts';
import { botsOverviewView, botView, MOVEMENTS_PAGE, shownOnce } from './views/bots.ts';
import { flash } from './views/layout.ts';
import { centsToMicros } from '../platform/money.ts';
import { partnerWalletSection } from './views/x402.ts';
import { partnerWalletData, postPartnerRail, registerX402Pages } from './x402Pages.ts';

// The overview of the owner's bots and the page of one bot with its actions. Every action calls
// the owner service (which checks ownership, writes the audit log and emits events) and answers a
// redirect back (post/redirect/get). A rotated key or secret is shown once through a flash
// (src/dashboard/flash.ts) that the page after the redirect consumes: reloading it rotates nothing
// and shows the value no more.

const MAX_FUND_CENTS = 1_000_000;

export function registerBotPages(app: App, ctx: AppContext): void {
  app.get('/', { schema: { tags, summary: 'Overview of your bots' } }, async (request, reply) => {
    const session = sessionOf(request);
    const { bots } = await listBots(ctx, session.ownerId);
    return reply.page(botsOverviewView(bots));
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
    const session = sessionOf(request);
    const bot = await getBot(ctx, session.ownerId, botId);
    const [guardrails, transactions, { entries }, partner] = await Promise.all([
      getMasterGuardrails(ctx.db, session.ownerId, ctx.clock.now()),
      listMoneyMovements(ctx, botId, MOVEMENTS_PAGE, options.before),
      listAudit(ctx, session.ownerId, botId, 25),
      partnerWalletData(ctx, session.ownerId, botId),
    ]);
    const names = await auditRecordNames(ctx, session.ownerId, auditReferences(entries));
    const railStatus = bot.rails.find((r) => r.rail === 'partner_wallet')?.status ?? 'inactive';
    const view = botView({
      csrf: session.csrfToken,
      bot,
      guardrails,
      transactions,
      entries,
      names,
      partnerSection: partnerWalletSection(bot.bot_id, railStatus, session.csrfToken, partner),
      top: options.top ?? '',
      values: options.values ?? {},
      // One key per page shown: a double-submitted (or resent) funding form funds once.
      fundKey: randomHex(16),
    });
    return reply.page(view, options.status ?? 200);
  };

  registerX402Pages(app, ctx, botPage);

  app.get(
    '/bots/:bot_id',
    {
      schema: {
        tags,
        summary: 'One bot: wallet, rails, cards, guardrails, keys, transactions, audit log',
        params: BotParams,
        querystring: BotQuery,
      },
    },
    async (request, reply) => {
      const botId = request.params.bot_id;
      let top = noticeFlash(request.query.notice, NOTICES.account, NOTICES.x402);
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

  app.post(
    '/bots/:bot_id/fund',
    {
      schema: {
        tags,
        summary: 'Add funds',
        params: BotParams,
        body: FundBody,
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
      const key = request.body.idempotency_key;
      const micros = centsToMicros(cents);
      await fundBot(
        ctx,
        sessionOf(request).ownerId,
        request.params.bot_id,
        micros,
        key && `dashboard:${key}`,
      );
      return reply.redirect(`/bots/${request.params.bot_id}?notice=funded`, 303);
    },
  );

  for (const [action, frozen] of [
    ['freeze', true],
    ['unfreeze', false],
  ] as const) {
    app.post(
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
        await setWalletFrozen(ctx, sessionOf(request).ownerId, request.params.bot_id, frozen);
        return reply.redirect(`/bots/${request.params.bot_id}?notice=${frozen ? 'frozen' : 'unfrozen'}`, 303);
      },
    );
  }

  app.post(
    '/bots/:bot_id/rails/:rail_key',
    {
      schema: {
        tags,
        summary: 'Turn a payment rail on or off',
        params: RailParams,
        body: RailBody,
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
        const r = await postPartnerRail(ctx, sessionOf(request).ownerId, botId, request.body.status);
        if (!r.ok) return botPage(request, reply, botId, { status: r.status, top: flash('bad', r.message) });
        return reply.redirect(
          `/bots/${botId}?notice=${request.body.status === 'active' ? 'x402_on' : 'x402_off'}`,
          303,
        );
      }
      await setRail(ctx, sessionOf(request).ownerId, botId, railKey, request.body.status, address);
      return reply.redirect(`/bots/${botId}?notice=rail`, 303);
    },
  );

  // Rotations answer a redirect (post/redirect/get): the new value travels in a one-time flash,
  // so reloading the page that shows it neither rotates again nor shows it twice.
  app.post(
    '/bots/:bot_id/api-key/rotate',
    { schema: { tags, summary: 'Rotate the API key (shown once)', params: BotParams, body: Form } },
    async (request, reply) => {
      const botId = request.params.bot_id;
      const result = await rotateApiKey(ctx, sessionOf(request).ownerId, botId);
      app.botAuthenticator.forgetBot(botId);
      const id = await putFlash(ctx, sessionFlashHolder(sessionOf(request)), {
        kind: 'api_key',
        bot_id: botId,
        value: result.api_key,
      });
      return reply.redirect(`/bots/${botId}?flash=${id}`, 303);
    },
  );

  app.post(
    '/bots/:bot_id/webhook-secret/rotate',
    { schema: { tags, summary: 'Rotate the webhook secret (shown once)', params: BotParams, body: Form } },
    async (request, reply) => {
      const botId = request.params.bot_id;
      const result = await rotateWebhookSecret(ctx, sessionOf(request).ownerId, botId);
      const id = await putFlash(ctx, sessionFlashHolder(sessionOf(request)), {
        kind: 'webhook_secret',
        bot_id: botId,
        value: result.webhook_secret,
      });
      return reply.redirect(`/bots/${botId}?flash=${id}`, 303);
    },
  );
}
