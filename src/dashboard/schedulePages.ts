import { type Static, Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../app.ts';
import { getBot } from '../owners/service.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import { IdParam } from '../platform/schemas.ts';
import { changeSchedule, createSchedule, listSchedules, listTasks } from '../tasks/schedules.ts';
import { html, type SafeHtml } from './html.ts';
import { botTabs, csrfField, dataTable, flash, page, pill, postButton, usd, when } from './layout.ts';
import { parseUsdToCents } from './present.ts';

// Schedules of a bot: recurring real purchases the bot is handed as tasks (src/tasks/schedules.ts
// createSchedule / listSchedules / changeSchedule, which check ownership and write the audit log).

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));
const BotParams = Type.Object({ bot_id: IdParam('bot') });
const ScheduleParams = Type.Object({ bot_id: IdParam('bot'), schedule_id: IdParam('schedule') });
const ACTIONS = ['pause', 'resume', 'delete'] as const;

const NOTICES: Record<string, string> = {
  created: 'Schedule created. Your bot receives the purchase as a task when it is due.',
  pause: 'Schedule paused.',
  resume: 'Schedule resumed from its next time.',
  delete: 'Schedule deleted.',
};

type FormValues = Partial<
  Record<
    | 'cron'
    | 'timezone'
    | 'card_id'
    | 'profile_index'
    | 'merchant_name'
    | 'merchant_url'
    | 'item_name'
    | 'amount_usd'
    | 'category',
    string
  >
>;

function sendHtml(reply: FastifyReply, status: number, body: string) {
  return reply.status(status).type('text/html; charset=utf-8').send(body);
}

export function registerSchedulePages(app: App, ctx: AppContext): void {
  const schedulesPage = async (
    request: FastifyRequest,
    reply: FastifyReply,
    botId: string,
    opts: { status?: number; top?: SafeHtml | string; values?: FormValues } = {},
  ) => {
    const session = request.dashboard!;
    const bot = await getBot(ctx, session.ownerId, botId);
    const [{ schedules }, { tasks }] = await Promise.all([
      listSchedules(ctx, session.ownerId, botId),
      listTasks(ctx, session.ownerId, botId, 20),
    ]);
    const csrf = session.csrfToken;
    const base = `/bots/${bot.bot_id}/schedules`;
    const v = opts.values ?? {};
    const cards = bot.cards.filter((c) => c.status !== 'pending_activation');
    const list = schedules.length
      ? html`<ul class="delivery-list">${schedules.map(
          (s) => html`<li class="card stack" data-testid="schedule" data-schedule="${s.schedule_id}">
  <div class="spread"><strong>${s.instructions.item_name}</strong>${pill(s.status === 'paused' ? 'frozen' : s.status, s.status)}</div>
  <div class="small">${usd(s.instructions.amount_cents / 100)} at ${s.instructions.merchant_name} <span class="muted">${s.instructions.merchant_url}</span></div>
  <dl class="facts">
    <div><dt>When</dt><dd><code>${s.cron}</code> <span class="muted small">${s.timezone}</span></dd></div>
    <div><dt>Next</dt><dd>${when(s.next_run_at)}</dd></div>
    <div><dt>Last</dt><dd>${when(s.last_run_at)}</dd></div>
    <div><dt>Profile</dt><dd>${s.instructions.profile_index} <span class="muted small">${s.instructions.category}</span></dd></div>
  </dl>
  <div class="row">${
    s.status === 'active'
      ? postButton(`${base}/${s.schedule_id}/pause`, 'Pause', csrf, { className: 'secondary' })
      : postButton(`${base}/${s.schedule_id}/resume`, 'Resume', csrf, { className: 'secondary' })
  }${postButton(`${base}/${s.schedule_id}/delete`, 'Delete', csrf, { className: 'danger' })}</div></li>`,
        )}</ul>`
      : html`<div class="card empty"><p class="muted">No schedules yet.</p></div>`;
    const form = cards.length
      ? html`<form method="post" action="${base}" class="stack">${csrfField(csrf)}
  <div class="grid two">
    <div class="field"><label for="item_name">Item</label><input id="item_name" name="item_name" required maxlength="500" value="${v.item_name ?? ''}"></div>
    <div class="field"><label for="amount_usd">Amount, $</label><input id="amount_usd" name="amount_usd" type="number" min="0.01" step="0.01" inputmode="decimal" required value="${v.amount_usd ?? ''}"></div>
    <div class="field"><label for="merchant_name">Merchant</label><input id="merchant_name" name="merchant_name" required maxlength="200" value="${v.merchant_name ?? ''}"></div>
    <div class="field"><label for="merchant_url">Merchant web address</label><input id="merchant_url" name="merchant_url" type="url" required maxlength="2000" placeholder="https://" value="${v.merchant_url ?? ''}"></div>
    <div class="field"><label for="cron">When (cron) <span class="hint">For example <code>0 9 * * 1</code> every Monday at 9:00, or <code>@daily</code></span></label><input id="cron" name="cron" required maxlength="200" value="${v.cron ?? ''}"></div>
    <div class="field"><label for="timezone">Time zone <span class="hint">For example Europe/Berlin</span></label><input id="timezone" name="timezone" required maxlength="100" value="${v.timezone ?? 'UTC'}"></div>
    <div class="field"><label for="card_id">Card</label><select id="card_id" name="card_id">${cards.map(
      (c) =>
        html`<option value="${String(c.card_id)}"${v.card_id === c.card_id ? html` selected` : ''}>${String(c.label ?? c.card_id)}</option>`,
    )}</select></div>
    <div class="field"><label for="profile_index">Profile <span class="hint">Your card's profile for a real purchase</span></label><select id="profile_index" name="profile_index">${[
      1, 2, 3, 4, 5, 6,
    ].map((i) => {
      const real = cards.find((c) => c.card_id === (v.card_id ?? cards[0]?.card_id))?.real_profile_index;
      const selected = v.profile_index ? v.profile_index === String(i) : i === real;
      return html`<option value="${i}"${selected ? html` selected` : ''}>${i}${i === real ? ' (your card)' : ''}</option>`;
    })}</select></div>
    <div class="field"><label for="category">Category <span class="hint">Optional</span></label><input id="category" name="category" maxlength="100" value="${v.category ?? ''}"></div>
  </div>
  <button type="submit">Create schedule</button></form>`
      : html`<p class="muted">Add and activate a card first: <a href="/bots/${bot.bot_id}/cards">Cards</a>.</p>`;
    const taskRows = tasks.length
      ? dataTable(
          [{ label: 'What', key: true }, { label: 'Status', key: true }, { label: 'Due' }, { label: 'Kind' }],
          tasks.map((t) => ({
            cells: [
              html`${t.item_name} <span class="muted small">${usd(t.amount_usd)} at ${t.merchant_name}</span>`,
              pill(t.status),
              when(t.due_at),
              t.kind.replace(/_/g, ' '),
            ],
          })),
        )
      : html`<p class="muted">No tasks handed to the bot yet.</p>`;
    const body = html`<p class="small"><a href="/">← All bots</a></p>
<h1>${bot.bot_name}: schedules</h1>
<p class="lead">Recurring purchases: when one is due, your bot receives it as a task and buys it within your card's limits and approval rules.</p>
${botTabs(bot.bot_id, 'schedules')}
${opts.top ?? ''}
${list}
<section class="card stack" aria-labelledby="new-h"><h2 id="new-h">New schedule</h2>${form}</section>
<section class="card" aria-labelledby="tasks-h"><h2 id="tasks-h">Recent tasks</h2>
  <p class="muted small">Decoy tasks keep the bot's behaviour indistinguishable; they never spend money.</p>${taskRows}</section>`;
    return sendHtml(
      reply,
      opts.status ?? 200,
      page({ title: `${bot.bot_name}: schedules`, session, nav: 'bots', body }),
    );
  };

  app.get<{ Params: Static<typeof BotParams>; Querystring: { notice?: string } }>(
    '/bots/:bot_id/schedules',
    {
      schema: {
        tags,
        summary: 'Schedules of a bot',
        params: BotParams,
        querystring: Type.Object({ notice: Text(40) }),
      },
    },
    async (request, reply) => {
      const text = request.query.notice ? NOTICES[request.query.notice] : undefined;
      return schedulesPage(request, reply, request.params.bot_id, { top: text ? flash('ok', text) : '' });
    },
  );

  app.post<{ Params: Static<typeof BotParams>; Body: FormValues }>(
    '/bots/:bot_id/schedules',
    {
      schema: {
        tags,
        summary: 'Create a schedule',
        params: BotParams,
        body: Type.Object({
          cron: Text(200),
          timezone: Text(100),
          card_id: Text(100),
          profile_index: Text(2),
          merchant_name: Text(200),
          merchant_url: Text(2000),
          item_name: Text(500),
          amount_usd: Text(30),
          category: Text(100),
          _csrf: Text(200),
        }),
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
      if (!/^[1-6]$/.test(b.profile_index ?? '')) return fail(400, 'Choose a profile from 1 to 6.');
      const required = ['cron', 'timezone', 'merchant_name', 'merchant_url', 'item_name'] as const;
      const missing = required.find((k) => !b[k]?.trim());
      if (missing) return fail(400, 'Fill in the item, merchant, web address, time and time zone.');
      const cardId = b.card_id && /^card_[a-z2-7]{1,64}$/.test(b.card_id) ? b.card_id : undefined;
      try {
        await createSchedule(ctx, request.dashboard!.ownerId, botId, {
          cron: b.cron!.trim(),
          timezone: b.timezone!.trim(),
          instructions: {
            ...(cardId ? { card_id: cardId } : {}),
            profile_index: Number(b.profile_index),
            merchant_name: b.merchant_name!,
            merchant_url: b.merchant_url!.trim(),
            item_name: b.item_name!,
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
    app.post<{ Params: Static<typeof ScheduleParams> }>(
      `/bots/:bot_id/schedules/:schedule_id/${action}`,
      {
        schema: {
          tags,
          summary: `${action[0]!.toUpperCase()}${action.slice(1)} a schedule`,
          params: ScheduleParams,
          body: Type.Object({ _csrf: Text(200) }),
        },
      },
      async (request, reply) => {
        await changeSchedule(
          ctx,
          request.dashboard!.ownerId,
          request.params.bot_id,
          request.params.schedule_id,
          action,
        );
        return reply.redirect(`/bots/${request.params.bot_id}/schedules?notice=${action}`, 303);
      },
    );
  }
}
