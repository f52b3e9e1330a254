import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processDueConfirmations } from '../../src/checkout/decisions.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { checkout, purchase, setupCard } from './helpers.ts';

// Held decoys are decided like the owner decides (docs/security.md): with the owner's history,
// decoys mostly copy it; before it, they follow their profile's persona.

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '10000' } });
});
afterAll(async () => {
  await svc.close();
});

const LIMITS = { per_transaction_cents: 1000, daily_cents: 1_000_000, monthly_cents: 10_000_000 };

async function setup() {
  const owner = await createOwner(svc);
  await svc.app.inject({
    method: 'PUT',
    url: '/api/v1/owner/guardrails',
    headers: owner.auth,
    payload: { per_transaction_cents: 1000, daily_budget_cents: 1_000_000, monthly_budget_cents: 10_000_000 },
  });
  const bot = await activeBot(svc, owner, { fundCents: 100_000 });
  const card = await setupCard(svc, owner, bot.bot_id, LIMITS);
  await svc.ctx.db.query(
    `UPDATE card_profiles SET allowance_cents = 1000000, allowance_window = 'month' WHERE card_id = $1`,
    [card.card_id],
  );
  return { owner, bot, card };
}

async function decoyDecisions(w: Awaited<ReturnType<typeof setup>>, count: number) {
  const out: Array<{ status: string; delayMs: number }> = [];
  for (let k = 0; k < count; k++) {
    const start = svc.clock.now();
    const res = await checkout(svc, w.bot, purchase(w.card.decoyIndex, 50));
    expect(res.statusCode).toBe(202);
    const id = res.json().confirmation_id;
    for (let t = 0; t <= 905; t += 5) {
      svc.clock.set(start + t * 1000);
      await processDueConfirmations(svc.ctx);
      const row = (
        await svc.ctx.db.query<{ status: string; decided_at: Date | null }>(
          'SELECT status, decided_at FROM checkout_confirmations WHERE id = $1',
          [id],
        )
      )[0]!;
      if (row.status !== 'pending') {
        out.push({ status: row.status, delayMs: new Date(row.decided_at!).getTime() - start });
        break;
      }
    }
  }
  return out;
}

describe('decisions of held decoys', () => {
  it('follow the owner once the owner has decided: an owner who denies after ~40 s gets decoys denied after ~40 s', async () => {
    const w = await setup();
    for (let k = 0; k < 30; k++) {
      const res = await checkout(svc, w.bot, purchase(w.card.real_profile_index, 50));
      expect(res.statusCode).toBe(202);
      svc.clock.advance(40_000);
      const deny = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/approvals/${res.json().confirmation_id}/deny`,
        headers: w.owner.auth,
      });
      expect(deny.statusCode).toBe(200);
    }
    const decided = await decoyDecisions(w, 40);
    const likeOwner = decided.filter(
      (d) => d.status === 'denied' && d.delayMs >= 20_000 && d.delayMs <= 80_000,
    );
    // 30/(30+10) of draws come from the owner's history; the persona may add more.
    expect(likeOwner.length).toBeGreaterThanOrEqual(20);
  });

  it('before any history, decoys follow their profile persona: decided, never at once, within the window', async () => {
    const w = await setup();
    const decided = await decoyDecisions(w, 20);
    expect(decided).toHaveLength(20);
    for (const d of decided) {
      expect(['approved', 'denied', 'expired']).toContain(d.status);
      expect(d.delayMs).toBeGreaterThanOrEqual(1000);
      expect(d.delayMs).toBeLessThanOrEqual(905_000);
      if (d.status === 'expired') expect(d.delayMs).toBeGreaterThanOrEqual(900_000);
    }
    const personas = await svc.ctx.db.query<{ persona_delay_ms: number }>(
      'SELECT persona_delay_ms FROM card_profiles WHERE card_id = $1',
      [w.card.card_id],
    );
    // Drawn per profile: not all the same.
    expect(new Set(personas.map((p) => p.persona_delay_ms)).size).toBeGreaterThan(1);
  });
});
