import type { Static } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import {
  getCard,
  listOwnerCards,
  type ProfileUpdate,
  profilesFile,
  startCard,
  updateCard,
  updateProfile,
} from '../cards/service.ts';
import { getBot } from '../owners/bots.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { optionalDisplayText } from '../platform/text.ts';
import { flashHolder, redirectAfterSave, takeFlash } from './flash.ts';
import { limitOrderWarning, NOTICES, noticeFlash, parseUsdToCents, tags } from './forms.ts';
import type { SafeHtml } from './html.ts';
import { sessionOf } from './http.ts';
import {
  BotParams,
  CardParams,
  CardSettingsBody,
  CardStartBody,
  CardStatusBody,
  NoticeFlashQuery,
  NoticeQuery,
  type PROFILE_FIELD_NAMES,
  ProfilesBody,
} from './schemas.ts';
import { cardsView, cardView } from './views/cards.ts';
import { flash } from './views/layout.ts';

// Cards of a bot: the setup wizard (src/dashboard/views/cards.ts draws it; the card is typed and
// split in the browser by /assets/card-wizard.js, which posts only the activation to the owner
// API), card guardrails, approval mode, status, and the allowance and approval rule of each
// payment profile. Every action calls src/cards/service.ts, which checks ownership and writes the
// audit log.

type CardParamsT = Static<typeof CardParams>;
type AmountField = 'per_transaction_usd' | 'daily_usd' | 'monthly_usd' | 'approval_threshold_usd';
const MAX_LIMIT_CENTS = 100_000_000;

export function registerCardPages(app: App, ctx: AppContext): void {
  const cardsPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    botId: string,
    opts: { status?: number; top?: SafeHtml | string } = {},
  ) => {
    const session = sessionOf(request);
    const bot = await getBot(ctx, session.ownerId, botId);
    const ownerCards = await listOwnerCards(ctx.db, session.ownerId);
    return reply.page(
      cardsView({ csrf: session.csrfToken, bot, ownerCards, top: opts.top ?? '' }),
      opts.status ?? 200,
    );
  };

  const cardPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    params: CardParamsT,
    opts: {
      status?: number;
      top?: SafeHtml | string;
      /** Typed values to keep after an error (field name → text). */
      values?: Record<string, string | undefined>;
      /** Which profile form the values belong to. */
      profile?: number;
    } = {},
  ) => {
    const session = sessionOf(request);
    const bot = await getBot(ctx, session.ownerId, params.bot_id);
    const card = await getCard(ctx, session.ownerId, params.bot_id, params.card_id);
    const ownerCards = await listOwnerCards(ctx.db, session.ownerId);
    const view = cardView({
      ownerCards,
      csrf: session.csrfToken,
      bot,
      card,
      top: opts.top ?? '',
      values: opts.values,
      profile: opts.profile,
    });
    return reply.page(view, opts.status ?? 200);
  };

  const bad = (message: string) => flash('bad', message);

  app.get(
    '/bots/:bot_id/cards',
    {
      schema: {
        tags,
        summary: 'Cards of a bot',
        params: BotParams,
        querystring: NoticeQuery,
      },
    },
    async (request, reply) => {
      return cardsPage(request, reply, request.params.bot_id, {
        top: noticeFlash(request.query.notice, NOTICES.cards),
      });
    },
  );

  app.post(
    '/bots/:bot_id/cards',
    {
      schema: {
        tags,
        summary: 'Start a card (step 1 of the wizard)',
        params: BotParams,
        body: CardStartBody,
      },
    },
    async (request, reply) => {
      // A label is a display name: one plain, visible line (platform/text.ts).
      const label = optionalDisplayText(request.body.label, 'label', 100) ?? undefined;
      const sameCardAs = request.body.same_card_as || undefined;
      const started = await startCard(ctx, sessionOf(request).ownerId, request.params.bot_id, {
        label,
        sameCardAs,
      });
      const notice = started.status === 'active' ? 'shared' : 'started';
      return reply.redirect(`/bots/${request.params.bot_id}/cards/${started.card_id}?notice=${notice}`, 303);
    },
  );

  app.get(
    '/bots/:bot_id/cards/:card_id',
    {
      schema: {
        tags,
        summary: 'One card: activation, profiles file, limits, approval, profiles',
        params: CardParams,
        querystring: NoticeFlashQuery,
      },
    },
    async (request, reply) => {
      let top = noticeFlash(request.query.notice, NOTICES.cards);
      if (request.query.flash) {
        const shown = await takeFlash(ctx, flashHolder(request), request.query.flash);
        if (shown?.kind === 'notice') top = flash(shown.level, shown.text);
      }
      return cardPage(request, reply, request.params, { top });
    },
  );

  app.get(
    '/bots/:bot_id/cards/:card_id/profiles-file',
    {
      schema: { tags, summary: 'Download the payment profiles file (step 3)', params: CardParams },
    },
    async (request, reply) => {
      const file = await profilesFile(
        ctx,
        sessionOf(request).ownerId,
        request.params.bot_id,
        request.params.card_id,
      );
      reply.header('content-disposition', `attachment; filename="payment-profiles-${file.card_id}.json"`);
      return reply.type('application/json; charset=utf-8').send(`${JSON.stringify(file, null, 2)}\n`);
    },
  );

  app.post(
    '/bots/:bot_id/cards/:card_id/settings',
    {
      schema: {
        tags,
        summary: 'Card guardrails and approval mode',
        params: CardParams,
        body: CardSettingsBody,
      },
    },
    async (request, reply) => {
      const b = request.body;
      // A field still showing the value the page showed (shown_<field>) changes nothing, even if
      // the value was changed elsewhere meanwhile; an emptied amount keeps its amount too.
      const amount = (field: AmountField, max: number): number | undefined | 'bad' => {
        const value = b[field];
        if (value === undefined || value.trim() === '') return undefined;
        const cents = parseUsdToCents(value);
        if (cents === undefined || cents > max) return 'bad';
        const shown = b[`shown_${field}`];
        return shown !== undefined && parseUsdToCents(shown) === cents ? undefined : cents;
      };
      const categoryList = (text: string) =>
        text
          .split(',')
          .map((c) => c.trim())
          .filter((c) => c.length > 0);
      const per = amount('per_transaction_usd', MAX_LIMIT_CENTS);
      const daily = amount('daily_usd', MAX_LIMIT_CENTS);
      const monthly = amount('monthly_usd', MAX_LIMIT_CENTS * 10);
      const threshold = amount('approval_threshold_usd', MAX_LIMIT_CENTS);
      if ([per, daily, monthly, threshold].includes('bad')) {
        return cardPage(request, reply, request.params, {
          status: 400,
          top: bad('Amounts are dollars with at most 2 decimals, for example 25 or 25.50.'),
          values: b,
        });
      }
      let categories: string[] | undefined;
      if (b.approved_categories !== undefined) {
        categories = categoryList(b.approved_categories);
        if (categories.length > 50 || categories.some((c) => c.length > 100)) {
          return cardPage(request, reply, request.params, {
            status: 400,
            top: bad('At most 50 categories of up to 100 characters each.'),
            values: b,
          });
        }
      }
      if (
        categories !== undefined &&
        b.shown_approved_categories !== undefined &&
        categoryList(b.shown_approved_categories.toLowerCase()).join(',') ===
          categoryList(b.approved_categories?.toLowerCase() ?? '').join(',')
      ) {
        categories = undefined;
      }
      const mode = b.approval_mode && b.approval_mode !== b.shown_approval_mode ? b.approval_mode : undefined;
      const changes = {
        ...(per !== undefined ? { per_transaction_cents: per as number } : {}),
        ...(daily !== undefined ? { daily_cents: daily as number } : {}),
        ...(monthly !== undefined ? { monthly_cents: monthly as number } : {}),
        ...(threshold !== undefined ? { approval_threshold_cents: threshold as number } : {}),
        ...(mode ? { approval_mode: mode } : {}),
        ...(categories !== undefined ? { approved_categories: categories } : {}),
      };
      const target = `/bots/${request.params.bot_id}/cards/${request.params.card_id}`;
      if (Object.keys(changes).length === 0) {
        // Nothing to save; the card must still be the owner's (getCard answers 404 otherwise).
        await getCard(ctx, sessionOf(request).ownerId, request.params.bot_id, request.params.card_id);
        return reply.redirect(`${target}?notice=unchanged`, 303);
      }
      const saved = await updateCard(
        ctx,
        sessionOf(request).ownerId,
        request.params.bot_id,
        request.params.card_id,
        changes,
      );
      // Saved either way; limits that cannot all be reached get a warning on the next page.
      const warning = limitOrderWarning({
        per: Math.round(saved.guardrails.per_transaction_usd * 100),
        day: Math.round(saved.guardrails.daily_usd * 100),
        month: Math.round(saved.guardrails.monthly_usd * 100),
      });
      return redirectAfterSave(ctx, sessionOf(request), reply, target, warning, 'settings');
    },
  );

  app.post(
    '/bots/:bot_id/cards/:card_id/status',
    {
      schema: {
        tags,
        summary: 'Freeze or unfreeze a card',
        params: CardParams,
        body: CardStatusBody,
      },
    },
    async (request, reply) => {
      try {
        await updateCard(ctx, sessionOf(request).ownerId, request.params.bot_id, request.params.card_id, {
          status: request.body.status,
        });
      } catch (err) {
        if (err instanceof ApiError && err.code === 'conflict') {
          return cardPage(request, reply, request.params, { status: 409, top: bad(err.message) });
        }
        throw err;
      }
      return reply.redirect(
        `/bots/${request.params.bot_id}/cards/${request.params.card_id}?notice=status`,
        303,
      );
    },
  );

  // Every profile in one form, one Save. Fields still showing what the page showed change nothing;
  // every amount is checked before any profile is written.
  app.post(
    '/bots/:bot_id/cards/:card_id/profiles',
    {
      schema: {
        tags,
        summary: 'All payment profiles of a card: allowance, window, approval rule',
        params: CardParams,
        body: ProfilesBody,
      },
    },
    async (request, reply) => {
      const b = request.body as Record<string, string | undefined>;
      const ownerId = sessionOf(request).ownerId;
      const { bot_id: botId, card_id: cardId } = request.params;
      const card = await getCard(ctx, ownerId, botId, cardId);
      const updates: [number, ProfileUpdate][] = [];
      for (const { profile_index: i } of card.profiles) {
        const field = (name: (typeof PROFILE_FIELD_NAMES)[number]) => b[`p${i}_${name}`]?.trim();
        const shown = (name: (typeof PROFILE_FIELD_NAMES)[number]) => b[`p${i}_shown_${name}`]?.trim();
        const update: ProfileUpdate = {};
        for (const [name, key] of [
          ['allowance_usd', 'allowance_cents'],
          ['approval_threshold_usd', 'approval_threshold_cents'],
        ] as const) {
          const value = field(name);
          if (!value) continue;
          const cents = parseUsdToCents(value);
          if (cents === undefined || cents > MAX_LIMIT_CENTS) {
            return cardPage(request, reply, request.params, {
              status: 400,
              top: bad(
                `Profile ${i}: amounts are dollars with at most 2 decimals, for example 25 or 25.50. Nothing was saved.`,
              ),
              values: b,
              profile: 0,
            });
          }
          const was = shown(name);
          if (was !== undefined && parseUsdToCents(was) === cents) continue;
          update[key] = cents;
        }
        const window = field('allowance_window');
        if (window && window !== shown('allowance_window')) {
          update.allowance_window = window as ProfileUpdate['allowance_window'];
        }
        const rule = field('approval_rule');
        if (rule && rule !== shown('approval_rule')) {
          update.approval_rule = rule as ProfileUpdate['approval_rule'];
        }
        const enabled = field('enabled');
        if (enabled && enabled !== shown('enabled')) update.enabled = enabled === 'yes';
        if (Object.keys(update).length > 0) updates.push([i, update]);
      }
      for (const [i, update] of updates) await updateProfile(ctx, ownerId, botId, cardId, i, update);
      return reply.redirect(
        `/bots/${botId}/cards/${cardId}?notice=${updates.length ? 'profiles' : 'unchanged'}#profiles-h`,
        303,
      );
    },
  );
}
