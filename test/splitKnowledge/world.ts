import { expect } from 'vitest';
import { registerBot } from '../../src/bots/register.ts';
import { activateCard, startCard, updateCard } from '../../src/cards/service.ts';
import { claimBot } from '../../src/owners/bots.ts';
import { fundBot } from '../../src/owners/funding.ts';
import { updateMasterGuardrails } from '../../src/owners/guardrails.ts';
import { centsToMicros } from '../../src/platform/money.ts';
import { setupCard, type TestCard } from '../checkout/helpers.ts';
import { splitCard } from '../support/cards.ts';
import {
  activeBot,
  createOwner,
  nextIp,
  putGuardrails,
  type RegisteredBot,
  type TestOwner,
  type TestService,
} from '../support/service.ts';

// Simulated owners, bots and cards for the split-knowledge suite: each its own owner (so master
// budgets are per bot), claimed and funded through the owner API, with a card activated from a
// profiles file built like the card wizard builds it (test/support/cards.ts).

export interface SimBot {
  owner: TestOwner;
  bot: Awaited<ReturnType<typeof activeBot>>;
  card: TestCard;
}

export interface SimBotOptions {
  fundCents: (i: number) => number;
  card?: Record<string, unknown>;
  master?: Record<string, number>;
  /** The real profile of bot i's card, instead of the service's draw (counterfactual copies). */
  realIndex?: (i: number) => number;
  /** The index of the first bot (default 0): a second world in the same service goes on from the first's. */
  first?: number;
}

/**
 * The simulated bots: the first through the owner API (HTTP, as the dashboard and the SDK do), the
 * rest through the same service functions those routes call, which leave the same rows for a
 * fraction of the cost (no request parsing, no owner-token lookup per request). That they do is
 * checked on every run: the first two bots' rows are compared (expectSameWorld). On PostgreSQL
 * bots are built a few at a time (independent owners, so nothing waits for a lock).
 */
export async function simBots(svc: TestService, n: number, options: SimBotOptions): Promise<SimBot[]> {
  const out: SimBot[] = [];
  const first = options.first ?? 0;
  const end = first + n;
  if (n === 0) return out;
  out.push(await simBotOverHttp(svc, first, options));
  if (n === 1) return out;
  out.push(await simBot(svc, first + 1, options));
  await expectSameWorld(svc, out[0]!, out[1]!);
  const batch = svc.ctx.db.kind === 'postgres' ? 8 : 1;
  for (let i = first + 2; i < end; i += batch) {
    const is = Array.from({ length: Math.min(batch, end - i) }, (_, k) => i + k);
    out.push(...(await Promise.all(is.map((j) => simBot(svc, j, options)))));
  }
  return out;
}

const simName = (_i: number) => 'sim-bot';
/** One owner per bot: an address of its own (random ones could meet, and share master budgets). */
const simEmail = (i: number) => `sim-${i}@example.com`;

/** Bot i of the world, through the owner API (the path a real owner takes). */
async function simBotOverHttp(svc: TestService, i: number, options: SimBotOptions): Promise<SimBot> {
  const owner = await createOwner(svc, simEmail(i));
  if (options.master) {
    const res = await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: owner.auth,
      payload: options.master,
    });
    if (res.statusCode !== 200) throw new Error(`guardrails: ${res.body}`);
  }
  const bot = await activeBot(svc, owner, {
    fundCents: options.fundCents(i),
    body: { bot_name: simName(i) },
  });
  const realIndex = options.realIndex?.(i);
  const card = await setupCard(svc, owner, bot.bot_id, options.card ?? {}, {
    ...(realIndex === undefined ? {} : { realIndex }),
  });
  return { owner, bot, card };
}

/** Bot i of the world, through the service functions the owner API's routes call. */
async function simBot(svc: TestService, i: number, options: SimBotOptions): Promise<SimBot> {
  const owner = await createOwner(svc, simEmail(i));
  if (options.master) await updateMasterGuardrails(svc.ctx, owner.id, options.master);
  const bot = await quickBot(svc, owner, { fundCents: options.fundCents(i), name: simName(i) });
  const card = await quickCard(svc, owner, bot.bot_id, options.card ?? {}, options.realIndex?.(i));
  return { owner, bot, card };
}

/**
 * A registered, claimed and funded bot, as activeBot makes it, through the service functions
 * behind POST /bots/register, /owner/claims and /owner/bots/:id/wallet/fund (for untimed set-up).
 */
export async function quickBot(
  svc: TestService,
  owner: TestOwner,
  options: { fundCents?: number; name?: string } = {},
): Promise<SimBot['bot']> {
  const ctx = svc.ctx;
  const bot = (await registerBot(
    ctx,
    {
      bot_name: options.name ?? `bot-${Math.random().toString(36).slice(2, 10)}`,
      owner_email: owner.email,
      callback_url: ctx.config.allowPrivateWebhookTargets
        ? 'http://127.0.0.1:9/hook'
        : 'https://webhooks.invalid/hook',
    },
    nextIp(),
  )) as unknown as RegisteredBot;
  await claimBot(ctx, owner.id, bot.claim_token ?? '');
  if (options.fundCents) await fundBot(ctx, owner.id, bot.bot_id, centsToMicros(options.fundCents));
  return { ...bot, auth: { authorization: `Bearer ${bot.api_key}` } };
}

/** A card started and activated as setupCard does it, through the routes' service functions. */
export async function quickCard(
  svc: TestService,
  owner: TestOwner,
  botId: string,
  patch: Record<string, unknown> = {},
  realIndex?: number,
): Promise<TestCard> {
  const ctx = svc.ctx;
  const started = (await startCard(ctx, owner.id, botId, { label: 'test card' })) as unknown as TestCard;
  const card = { ...started };
  if (realIndex !== undefined) {
    await ctx.db.query('UPDATE cards SET real_profile_index = $2 WHERE id = $1', [card.card_id, realIndex]);
    card.real_profile_index = realIndex;
  }
  const split = splitCard({ ...card, bot_id: botId } as Parameters<typeof splitCard>[0]);
  await activateCard(ctx, owner.id, botId, card.card_id, { ...split.activation, different_card: true });
  if (Object.keys(patch).length > 0) await updateCard(ctx, owner.id, botId, card.card_id, patch);
  return { ...card, decoyIndex: card.real_profile_index === 1 ? 2 : 1, file: split.file };
}

/**
 * Two bots of a world, one built over HTTP and one through the service functions, left the same
 * rows in every table that names a bot, an owner or a card (ids, secrets, random draws and the
 * owner token's last use, which only authenticated requests touch, left out).
 */
export async function expectSameWorld(svc: TestService, a: SimBot, b: SimBot): Promise<void> {
  const columns = await svc.ctx.db.query<{ table_name: string; column_name: string }>(
    `SELECT table_name, column_name FROM information_schema.columns
      WHERE table_schema = current_schema() AND column_name IN ('bot_id', 'owner_id', 'card_id')`,
  );
  const tables = new Map<string, string[]>();
  for (const c of columns) tables.set(c.table_name, [...(tables.get(c.table_name) ?? []), c.column_name]);
  const rowsOf = async (x: SimBot) => {
    const ids = { bot_id: x.bot.bot_id, owner_id: x.owner.id, card_id: x.card.card_id };
    const names: Array<[string, string]> = [
      [x.bot.bot_id, '<bot>'],
      [x.owner.id, '<owner>'],
      [x.card.card_id, '<card>'],
      [x.owner.email, '<email>'],
    ];
    const out: Record<string, string[]> = {};
    const read = async (table: string, where: string, params: unknown[]) => {
      const rows = await svc.ctx.db.query(`SELECT * FROM ${table} WHERE ${where}`, params);
      out[table] = rows
        .map((r) => {
          if (table === 'cards') {
            // The real profile is the copy's own (realIndex) or the service's draw: as the card says.
            expect(r.real_profile_index).toBe(x.card.real_profile_index);
            r.real_profile_index = '<real>';
          }
          const kept = Object.entries(r)
            .filter(([k]) => !IGNORED.has(k) && !/_(hash|enc|prefix)$/.test(k))
            .sort(([p], [q]) => p.localeCompare(q));
          let text = JSON.stringify(kept);
          for (const [value, name] of names) text = text.replaceAll(value, name);
          // Ids the service drew (events, deliveries, fundings): random on either path.
          return text.replace(/\b([a-z]+)_[a-z0-9]{12,}\b/g, '$1_<id>');
        })
        .sort();
    };
    for (const [table, cols] of tables) {
      const where = cols.map((c, k) => `${c} = $${k + 1}`).join(' OR ');
      await read(
        table,
        where,
        cols.map((c) => ids[c as keyof typeof ids]),
      );
    }
    await read('bots', 'id = $1', [x.bot.bot_id]);
    await read('owners', 'id = $1', [x.owner.id]);
    await read('cards', 'id = $1', [x.card.card_id]);
    return out;
  };
  const want = await rowsOf(a);
  expect(Object.keys(want).length).toBeGreaterThan(10);
  expect(await rowsOf(b)).toEqual(want);
}

/**
 * Left out of the comparison: serial and drawn ids, the global event sequence, the client address
 * (a fresh one per registration on both paths), the missing digits' position (drawn), and the
 * owner token's last use (only authenticated requests touch it).
 */
const IGNORED = new Set(['id', 'seq', 'transaction_id', 'registered_ip', 'last_used_at', 'missing_position']);

/** Every event of a bot as it is delivered (type, its time and data). */
export async function botEvents(svc: TestService, botId: string) {
  const rows = await svc.ctx.db.query<{ type: string; body: string; created_at: Date }>(
    'SELECT type, body, created_at FROM events WHERE bot_id = $1 ORDER BY created_at, id',
    [botId],
  );
  return rows.map((r) => ({
    type: r.type,
    at: new Date(r.created_at).getTime(),
    data: JSON.parse(r.body).data,
  }));
}

/** An owner whose master budgets stay out of the way ($10 a purchase, $1,000,000 a day and a month). */
export async function ownerWithWideBudgets(svc: TestService): Promise<TestOwner> {
  const owner = await createOwner(svc);
  await putGuardrails(svc, owner, {
    per_transaction_cents: 1000,
    daily_budget_cents: 100_000_000,
    monthly_budget_cents: 100_000_000,
  });
  return owner;
}
