import { BOT_SECURITY, OWNER_SECURITY, type App } from '../platform/http.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import { botOf } from '../bots/auth.ts';
import { ownerOf } from '../owners/auth.ts';
import { DEFAULT_PAGE_LIMIT, ErrorBody } from '../platform/schemas.ts';
import { changeSchedule, createSchedule, listSchedules, listTasks } from './schedules.ts';
import {
  BotParams,
  NextTaskResponse,
  Schedule,
  ScheduleBody,
  ScheduleList,
  ScheduleParams,
  TaskList,
  TaskListQuery,
} from './schemas.ts';
import { nextTask } from './service.ts';

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

  app.post(
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
        .send(await createSchedule(ctx, ownerOf(request).id, request.params.bot_id, request.body)),
  );

  app.get(
    '/api/v1/owner/bots/:bot_id/schedules',
    {
      schema: {
        tags,
        security,
        summary: "The bot's schedules (active and paused)",
        params: BotParams,
        response: { 200: ScheduleList, 404: ErrorBody },
      },
    },
    async (request) => listSchedules(ctx, ownerOf(request).id, request.params.bot_id),
  );

  for (const action of ['pause', 'resume'] as const) {
    app.post(
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
        changeSchedule(ctx, ownerOf(request).id, request.params.bot_id, request.params.schedule_id, action),
    );
  }

  app.get(
    '/api/v1/owner/bots/:bot_id/tasks',
    {
      schema: {
        tags,
        security,
        summary: "The bot's recent tasks, newest first (owner view)",
        params: BotParams,
        querystring: TaskListQuery,
        response: { 200: TaskList, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) =>
      listTasks(ctx, ownerOf(request).id, request.params.bot_id, request.query.limit ?? DEFAULT_PAGE_LIMIT),
  );

  app.delete(
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
      changeSchedule(ctx, ownerOf(request).id, request.params.bot_id, request.params.schedule_id, 'delete'),
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
    async (request) => nextTask(ctx, botOf(request).id),
  );
}
