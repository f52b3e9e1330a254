import type { FastifyReply, FastifyRequest } from 'fastify';
import { getBot } from '../owners/bots.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { changeSchedule, createSchedule, listSchedules, listTasks } from '../tasks/schedules.ts';
import { NOTICES, noticeFlash, parseUsdToCents, tags } from './forms.ts';
import type { SafeHtml } from './html.ts';
import { sessionOf } from './http.ts';
import { BotParams, CsrfForm, NoticeQuery, ScheduleBody, ScheduleParams } from './schemas.ts';
import { flash } from './views/layout.ts';
import { type FormValues, schedulesView } from './views/schedules.ts';

// Schedules of a bot: recurring real purchases the bot is handed as tasks (src/tasks/schedules.ts
// createSchedule / listSchedules / changeSchedule, which check ownership and write the audit log).

const ACTIONS = ['pause', 'resume', 'delete'] as const;

export function registerSchedulePages(app: App, ctx: AppContext): void {
  const schedulesPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    botId: string,
    opts: { status?: number; top?: SafeHtml | string; values?: FormValues } = {},
  ) => {
    const session = sessionOf(request);
    const bot = await getBot(ctx, session.ownerId, botId);
    const [{ schedules }, { tasks }] = await Promise.all([
      listSchedules(ctx, session.ownerId, botId),
      listTasks(ctx, session.ownerId, botId, 20),
    ]);
    const view = schedulesView({
      csrf: session.csrfToken,
      bot,
      schedules,
      tasks,
      top: opts.top ?? '',
      values: opts.values,
    });
    return reply.page(view, opts.status ?? 200);
  };

  app.get(
    '/bots/:bot_id/schedules',
    {
      schema: {
        tags,
        summary: 'Schedules of a bot',
        params: BotParams,
        querystring: NoticeQuery,
      },
    },
    async (request, reply) => {
      return schedulesPage(request, reply, request.params.bot_id, {
        top: noticeFlash(request.query.notice, NOTICES.schedules),
      });
    },
  );

  app.post(
    '/bots/:bot_id/schedules',
    {
      schema: {
        tags,
        summary: 'Create a schedule',
        params: BotParams,
        body: ScheduleBody,
      },
    },
    async (request, reply) => {
      const b = request.body;
      const botId = request.params.bot_id;
      const values: FormValues = { ...b };
      const fail = (status: number, message: string) =>
        schedulesPage(request, reply, botId, { status, top: flash('bad', message), values });
      const cents = parseUsdToCents(b.amount_usd);
      if (cents === undefined || cents < 1 || cents > 10_000_000)
        return fail(400, 'Enter an amount between $0.01 and $100,000.00.');
      const { cron, timezone, merchant_name, merchant_url, item_name } = b;
      if (
        !cron?.trim() ||
        !timezone?.trim() ||
        !merchant_name?.trim() ||
        !merchant_url?.trim() ||
        !item_name?.trim()
      )
        return fail(400, 'Fill in the item, merchant, web address, time and time zone.');
      const cardId = b.card_id && /^card_[a-z2-7]{1,64}$/.test(b.card_id) ? b.card_id : undefined;
      try {
        await createSchedule(ctx, sessionOf(request).ownerId, botId, {
          cron: cron.trim(),
          timezone: timezone.trim(),
          instructions: {
            ...(cardId ? { card_id: cardId } : {}),
            merchant_name,
            merchant_url: merchant_url.trim(),
            item_name,
            amount_cents: cents,
            ...(b.category?.trim() ? { category: b.category.trim() } : {}),
          },
        });
      } catch (err) {
        // The bot itself is checked first (another owner's bot is the 404 page); the rest is the form.
        if (err instanceof ApiError && err.code !== 'not_found') {
          return fail(err.status === 404 ? 400 : err.status, err.message);
        }
        throw err;
      }
      return reply.redirect(`/bots/${botId}/schedules?notice=created`, 303);
    },
  );

  for (const action of ACTIONS) {
    app.post(
      `/bots/:bot_id/schedules/:schedule_id/${action}`,
      {
        schema: {
          tags,
          summary: `${action.charAt(0).toUpperCase()}${action.slice(1)} a schedule`,
          params: ScheduleParams,
          body: CsrfForm,
        },
      },
      async (request, reply) => {
        await changeSchedule(
          ctx,
          sessionOf(request).ownerId,
          request.params.bot_id,
          request.params.schedule_id,
          action,
        );
        return reply.redirect(`/bots/${request.params.bot_id}/schedules?notice=${action}`, 303);
      },
    );
  }
}
