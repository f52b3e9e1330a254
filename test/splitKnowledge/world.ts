import { setupCard, type TestCard } from '../checkout/helpers.ts';
import { expect } from 'vitest';
import { activeBot, createOwner, type TestOwner, type TestService } from '../support/service.ts';

// Simulated owners, bots and cards for the split-knowledge suite: each its own owner (so master
// budgets are per bot), claimed and funded through the owner API, with a card activated from a
// profiles file built like the card wizard builds it (test/support/cards.ts).

export interface SimBot {
  owner: TestOwner;
  bot: Awaited<ReturnType<typeof activeBot>>;
  card: TestCard;
}

export async function simBots(
  svc: TestService,
  n: number,
  options: {
    fundCents: (i: number) => number;
    card?: Record<string, unknown>;
    master?: Record<string, number>;
    /** The real profile of bot i's card, instead of the service's draw (counterfactual copies). */
    realIndex?: (i: number) => number;
  },
): Promise<SimBot[]> {
  const out: SimBot[] = [];
  for (let i = 0; i < n; i++) {
    const owner = await createOwner(svc);
    if (options.master) {
      const res = await svc.app.inject({
        method: 'PUT',
        url: '/api/v1/owner/guardrails',
        headers: owner.auth,
        payload: options.master,
      });
      if (res.statusCode !== 200) throw new Error(`guardrails: ${res.body}`);
    }
    const bot = await activeBot(svc, owner, { fundCents: options.fundCents(i) });
    const realIndex = options.realIndex?.(i);
    const card = await setupCard(svc, owner, bot.bot_id, options.card ?? {}, {
      ...(realIndex === undefined ? {} : { realIndex }),
    });
    out.push({ owner, bot, card });
  }
  return out;
}

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
  const res = await svc.app.inject({
    method: 'PUT',
    url: '/api/v1/owner/guardrails',
    headers: owner.auth,
    payload: {
      per_transaction_cents: 1000,
      daily_budget_cents: 100_000_000,
      monthly_budget_cents: 100_000_000,
    },
  });
  expect(res.statusCode, res.body).toBe(200);
  return owner;
}
