import { type Static, Type } from '@sinclair/typebox';
import type { App } from '../app.ts';
import { BOT_SECURITY } from '../bots/routes.ts';
import { OWNER_SECURITY } from '../owners/routes.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import { ErrorBody, IdParam } from '../platform/schemas.ts';
import { changeSchedule, createSchedule, listSchedules, listTasks } from './schedules.ts';
import { nextTask } from './service.ts';

const Instructions = Type.Object({
  profile_index: Type.Integer(),
  merchant_name: Type.String(),
  merchant_url: Type.String(),
  item_name: Type.String(),
  amount_cents: Type.Integer(),
  category: Type.String(),
  card_id: Type.Optional(Type.String()),
});

const NextTaskResponse = Type.Object({
  has_task: Type.Boolean(),
  task_type: Type.Optional(Type.Literal('purchase')),
  task_id: Type.Optional(Type.String()),
  instructions: Type.Optional(Instructions),
  message: Type.String(),
});

const ScheduleInstructionsBody = Type.Object(
  {
    card_id: Type.Optional(IdParam('card')),
    profile_index: Type.Integer({ minimum: 1, maximum: 6 }),
    merchant_name: Type.String({ minLength: 1, maxLength: 200 }),
    merchant_url: Type.String({ minLength: 1, maxLength: 2000 }),
    item_name: Type.String({ minLength: 1, maxLength: 500 }),
    amount_cents: Type.Integer({ minimum: 1, maximum: 10_000_000 }),
    category: Type.Optional(Type.String({ maxLength: 100 })),
  },
  { additionalProperties: false },
);

const ScheduleBody = Type.Object(
  {
    cron: Type.String({ minLength: 1, maxLength: 200 }),
    timezone: Type.String({ minLength: 1, maxLength: 100 }),
    instructions: ScheduleInstructionsBody,
  },
  { additionalProperties: false },
);

const Schedule = Type.Object({
  schedule_id: Type.String(),
  bot_id: Type.String(),
  cron: Type.String(),
  timezone: Type.String(),
  status: Type.Union([Type.Literal('active'), Type.Literal('paused'), Type.Literal('deleted')]),
  instructions: Type.Object({
    card_id: Type.String(),
    profile_index: Type.Integer(),
    merchant_name: Type.String(),
    merchant_url: Type.String(),
    item_name: Type.String(),
    amount_cents: Type.Integer(),
    category: Type.String(),
  }),
  next_run_at: Type.Union([Type.String(), Type.Null()]),
  last_run_at: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const BotParams = Type.Object({ bot_id: IdParam('bot') });
const ScheduleParams = Type.Object({ bot_id: IdParam('bot'), schedule_id: IdParam('schedule') });

export async function registerTaskRoutes(app: App, ctx: AppContext): Promise<void> {
  // The next-task call has no body; a client that still declares JSON and sends nothing (curl -H
  // 'Content-Type: application/json' -X POST) gets its task rather than a 400 for the empty body.
  await app.register(async (scope: App) => {
    scope.removeContentTypeParser('application/json');
    scope.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
      const text = String(body);
      if (text.trim() === '') return done(null, undefined);
      try {
        done(null, JSON.parse(text));
      } catch {
        done(new ApiError('validation_error', 'The body is not valid JSON.'), undefined);
      }
    });
    registerNextTask(scope, ctx);
  });

  const tags = ['owner', 'schedules'];
  const security = OWNER_SECURITY;

  app.post<{ Params: Static<typeof BotParams>; Body: Static<typeof ScheduleBody> }>(
    '/api/v1/owner/bots/:bot_id/schedules',
    {
      schema: {
        tags,
        security,
        summary: 'Schedule a recurring real purchase task (cron in a time zone)',
        params: BotParams,
        body: ScheduleBody,
        response: { 201: Schedule, 400: ErrorBody, 403: ErrorBody, 404: ErrorBody },
      },
    },
    async (request, reply) =>
      reply
        .status(201)
        .send(await createSchedule(ctx, request.owner!.id, request.params.bot_id, request.body)),
  );

  app.get<{ Params: Static<typeof BotParams> }>(
    '/api/v1/owner/bots/:bot_id/schedules',
    {
      schema: {
        tags,
        security,
        summary: "The bot's schedules (active and paused)",
        params: BotParams,
        response: { 200: Type.Object({ schedules: Type.Array(Schedule) }), 404: ErrorBody },
      },
    },
    async (request) => listSchedules(ctx, request.owner!.id, request.params.bot_id),
  );

  for (const action of ['pause', 'resume'] as const) {
    app.post<{ Params: Static<typeof ScheduleParams> }>(
      `/api/v1/owner/bots/:bot_id/schedules/:schedule_id/${action}`,
      {
        schema: {
          tags,
          security,
          summary:
            action === 'pause'
              ? 'Pause a schedule (no tasks until resumed)'
              : 'Resume a schedule from its next occurrence (missed ones are not produced)',
          params: ScheduleParams,
          response: { 200: Schedule, 404: ErrorBody },
        },
      },
      async (request) =>
        changeSchedule(ctx, request.owner!.id, request.params.bot_id, request.params.schedule_id, action),
    );
  }

  app.get<{ Params: Static<typeof BotParams>; Querystring: { limit?: string } }>(
    '/api/v1/owner/bots/:bot_id/tasks',
    {
      schema: {
        tags,
        security,
        summary: "The bot's recent tasks, newest first (owner view)",
        params: BotParams,
        querystring: Type.Object({ limit: Type.Optional(Type.String({ pattern: '^[0-9]{1,3}$' })) }),
        response: { 200: Type.Object({}, { additionalProperties: true }), 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => {
      const raw = request.query.limit === undefined ? 50 : Number(request.query.limit);
      return listTasks(ctx, request.owner!.id, request.params.bot_id, Math.min(Math.max(raw, 1), 200));
    },
  );

  app.delete<{ Params: Static<typeof ScheduleParams> }>(
    '/api/v1/owner/bots/:bot_id/schedules/:schedule_id',
    {
      schema: {
        tags,
        security,
        summary: 'Delete a schedule (tasks already produced stay)',
        params: ScheduleParams,
        response: { 200: Schedule, 404: ErrorBody },
      },
    },
    async (request) =>
      changeSchedule(ctx, request.owner!.id, request.params.bot_id, request.params.schedule_id, 'delete'),
  );
}

function registerNextTask(app: App, ctx: AppContext): void {
  app.post(
    '/api/v1/bot/tasks/next',
    {
      schema: {
        tags: ['bot'],
        summary: 'The next purchase task (the one leased to you, else the oldest available)',
        description:
          'No request body. A task handed out stays leased to the bot for one hour and is returned again until a checkout with its task_id is approved or the lease lapses.',
        security: BOT_SECURITY,
        response: { 200: NextTaskResponse, 401: ErrorBody },
      },
    },
    async (request) => nextTask(ctx, request.bot!.id),
  );
}
