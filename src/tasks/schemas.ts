import { Type } from '@sinclair/typebox';
import { IdParam, PageLimit } from '../platform/schemas.ts';

// HTTP schemas of the task and schedule routes (routes.ts); handler types are their Static<> types.

export const Instructions = Type.Object({
  profile_index: Type.Integer(),
  merchant_name: Type.String(),
  merchant_url: Type.String(),
  item_name: Type.String(),
  amount_cents: Type.Integer(),
  category: Type.String(),
  card_id: Type.Optional(Type.String()),
});

export const NextTaskResponse = Type.Object({
  has_task: Type.Boolean(),
  task_type: Type.Optional(Type.Literal('purchase')),
  task_id: Type.Optional(Type.String()),
  instructions: Type.Optional(Instructions),
  message: Type.String(),
});

export const ScheduleInstructionsBody = Type.Object(
  {
    card_id: Type.Optional(IdParam('card')),
    profile_index: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 6,
        description: "Optional: a schedule buys with the card's real profile; any other index is refused.",
      }),
    ),
    merchant_name: Type.String({ minLength: 1, maxLength: 200 }),
    merchant_url: Type.String({ minLength: 1, maxLength: 2000 }),
    item_name: Type.String({ minLength: 1, maxLength: 500 }),
    amount_cents: Type.Integer({ minimum: 1, maximum: 10_000_000 }),
    category: Type.Optional(Type.String({ maxLength: 100 })),
  },
  { additionalProperties: false },
);

export const ScheduleBody = Type.Object(
  {
    cron: Type.String({ minLength: 1, maxLength: 200 }),
    timezone: Type.String({ minLength: 1, maxLength: 100 }),
    instructions: ScheduleInstructionsBody,
  },
  { additionalProperties: false },
);

export const Schedule = Type.Object({
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

export const BotParams = Type.Object({ bot_id: IdParam('bot') });
export const ScheduleParams = Type.Object({ bot_id: IdParam('bot'), schedule_id: IdParam('schedule') });

export const ScheduleList = Type.Object({ schedules: Type.Array(Schedule) });
export const TaskListQuery = Type.Object({ limit: Type.Optional(PageLimit) });

const Time = Type.String({ format: 'date-time' });
/** The owner's view of a bot's tasks (schedules.ts listTasks). */
export const TaskList = Type.Object({
  tasks: Type.Array(
    Type.Object({
      task_id: Type.String(),
      // Not an enumeration: /openapi.json never names the decoy mechanism.
      kind: Type.String(),
      schedule_id: Type.Union([Type.String(), Type.Null()]),
      card_id: Type.String(),
      profile_index: Type.Integer(),
      merchant_name: Type.String(),
      merchant_url: Type.String(),
      item_name: Type.String(),
      amount_usd: Type.Number(),
      category: Type.String(),
      status: Type.String(),
      confirmation_id: Type.Union([Type.String(), Type.Null()]),
      due_at: Time,
      available_at: Time,
      completed_at: Type.Union([Time, Type.Null()]),
    }),
  ),
});
