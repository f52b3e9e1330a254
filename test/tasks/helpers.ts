import { expect } from 'vitest';
import { runTasksOnce } from '../../src/tasks/engine.ts';
import {
  activeBot,
  createOwner,
  type TestOwner,
  type TestService,
  giveGenerousBudgets,
} from '../support/service.ts';
import { type Bot, patchCard, putProfile, setupCard, type TestCard } from '../checkout/helpers.ts';

export const HOUR = 3_600_000;
export const MINUTE = 60_000;

export interface World {
  owner: TestOwner;
  bot: Bot;
  card: TestCard;
}

/** An owner, a funded bot and an activated card (optionally patched). */
export async function world(
  svc: TestService,
  options: {
    fundCents?: number;
    patch?: Record<string, unknown>;
    decoys?: boolean;
    wideMaster?: boolean;
  } = {},
): Promise<World> {
  const owner = await createOwner(svc);
  if (options.wideMaster) {
    await giveGenerousBudgets(svc, owner);
  }
  const bot = await activeBot(svc, owner, { fundCents: options.fundCents ?? 10_000 });
  const card = await setupCard(svc, owner, bot.bot_id, options.patch ?? {});
  if (options.decoys === false) await disableDecoys(svc, owner, bot.bot_id, card);
  return { owner, bot, card };
}

/** Turns off the card's decoy profiles, so a test sees only the tasks it schedules. */
export async function disableDecoys(svc: TestService, owner: TestOwner, botId: string, card: TestCard) {
  for (let i = 1; i <= 6; i++) {
    if (i !== card.real_profile_index)
      await putProfile(svc, owner, botId, card.card_id, i, { enabled: false });
  }
}

export const autoApprove = {
  approval_mode: 'auto_approve_under_threshold',
  approval_threshold_cents: 1_000_000,
};

export async function tick(svc: TestService) {
  return runTasksOnce(svc.ctx);
}

export function scheduleBody(
  card: TestCard,
  extra: Record<string, unknown> = {},
  ins: Record<string, unknown> = {},
) {
  return {
    cron: '0 * * * *',
    timezone: 'UTC',
    instructions: {
      profile_index: card.real_profile_index,
      merchant_name: 'Corner Coffee Roasters',
      merchant_url: 'https://corner-coffee.example.com/beans/house-blend',
      item_name: 'House blend 250 g',
      amount_cents: 350,
      category: 'groceries',
      ...ins,
    },
    ...extra,
  };
}

export async function createSchedule(
  svc: TestService,
  w: Pick<World, 'owner' | 'bot'>,
  body: Record<string, unknown>,
) {
  return svc.app.inject({
    method: 'POST',
    url: `/api/v1/owner/bots/${w.bot.bot_id}/schedules`,
    headers: w.owner.auth,
    payload: body,
  });
}

export async function nextTask(svc: TestService, bot: { auth: Record<string, string> }) {
  const res = await svc.app.inject({ method: 'POST', url: '/api/v1/bot/tasks/next', headers: bot.auth });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as {
    has_task: boolean;
    task_type?: string;
    task_id?: string;
    instructions?: Record<string, unknown>;
    message: string;
  };
}

export async function taskRow(svc: TestService, id: string) {
  const rows = await svc.ctx.db.query<Record<string, unknown>>('SELECT * FROM tasks WHERE id = $1', [id]);
  return rows[0]!;
}

export async function taskRows(svc: TestService, botId: string) {
  return svc.ctx.db.query<{
    id: string;
    is_decoy: boolean;
    status: string;
    due_at: Date;
    available_at: Date | null;
    profile_index: number;
    amount_micros: number;
    category: string;
    merchant_name: string;
    merchant_url: string;
    item_name: string;
    schedule_id: string | null;
  }>('SELECT * FROM tasks WHERE bot_id = $1 ORDER BY due_at, id', [botId]);
}

export { patchCard };

/** Text as the shop pages print it (HTML-escaped). */
export function html(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );
}
