import { randomInt } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processDueConfirmations } from '../../src/spend/holds.ts';
import { checkout, poll, putProfile } from '../checkout/helpers.ts';
import { createTestService, type TestService } from '../support/service.ts';
import { createSchedule, MINUTE, scheduleBody, tick, type World, world } from './helpers.ts';

// Nothing the bot can observe separates decoy tasks from real ones. A day and a half of traffic on
// a fake clock: three bots with owner schedules (real tasks) and the decoys the engine adds, each
// task fetched and fulfilled through the checkout (approved by its schedule whatever the card's
// approval mode; the code that decides held ones stays, for completeness). Then, per endpoint, the responses of both populations are
// compared by status code, key set and JSON type signature, categorical values and id/URL shapes.

type Kind = 'real' | 'decoy';
interface Seen {
  kind: Kind;
  what: string;
  status: number;
  body: Record<string, unknown>;
}

const BASE_URL = 'https://pay.example.org';
const SHOP_BASE = 'https://shops.example.net';

/** The JSON type signature of a value: objects by sorted keys, arrays by their elements' signatures (JSON has one number type). */
function signature(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `[${[...new Set(value.map(signature))].sort().join('|')}]`;
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b));
    return `{${entries.map(([k, v]) => `${k}:${signature(v)}`).join(',')}}`;
  }
  return typeof value;
}

describe('decoy and real tasks look alike to the bot', () => {
  let svc: TestService;
  const worlds: World[] = [];
  const seen: Seen[] = [];
  const eventsSeen: Seen[] = [];

  beforeAll(async () => {
    svc = await createTestService({
      env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000', BASE_URL, DECOY_SHOP_BASE_URL: SHOP_BASE },
    });
    const modes = [
      { approval_mode: 'ask_for_everything' },
      { approval_mode: 'auto_approve_under_threshold', approval_threshold_cents: 1500 },
      { approval_mode: 'auto_approve_by_category', approved_categories: ['books'] },
    ];
    for (const mode of modes) {
      const w = await world(svc, {
        fundCents: 1_000_000,
        wideMaster: true,
        patch: { per_transaction_cents: 5000, daily_cents: 1_000_000, monthly_cents: 10_000_000, ...mode },
      });
      // Every profile gets the same allowance, as the owner guide recommends.
      for (let i = 1; i <= 6; i++) {
        await putProfile(svc, w.owner, w.bot.bot_id, w.card.card_id, i, { allowance_cents: 10_000_000 });
      }
      for (const [cron, ins] of [
        [
          '0 */2 * * *',
          {
            merchant_name: 'Paper Lantern Books',
            merchant_url: 'https://paperlantern.example.com/p/1188',
            item_name: 'Poetry anthology',
            amount_cents: 1299,
            category: 'books',
          },
        ],
        [
          '30 */2 * * *',
          {
            merchant_name: 'Daily Grind Coffee',
            merchant_url: 'https://dailygrind.example.com/shop/espresso',
            item_name: 'Espresso beans 1 kg',
            amount_cents: 1850,
            category: 'groceries',
          },
        ],
      ] as const) {
        const res = await createSchedule(svc, w, scheduleBody(w.card, { cron }, ins));
        expect(res.statusCode, res.body).toBe(201);
      }
      worlds.push(w);
    }
  });
  afterAll(async () => {
    await svc.close();
  });

  it('simulates a day and a half of tasks and checkouts', async () => {
    const kindOf = async (taskId: string): Promise<Kind> => {
      const rows = await svc.ctx.db.query<{ is_decoy: boolean }>('SELECT is_decoy FROM tasks WHERE id = $1', [
        taskId,
      ]);
      return rows[0]!.is_decoy ? 'decoy' : 'real';
    };
    const pending: Array<{ w: World; id: string; kind: Kind; polled: boolean }> = [];
    const ownerPlans: Array<{ w: World; id: string; at: number; outcome: 'approve' | 'deny' | 'none' }> = [];
    const end = svc.clock.now() + 36 * 60 * MINUTE;
    while (svc.clock.now() < end) {
      svc.clock.advance(10 * MINUTE);
      await tick(svc);
      // The owner decides real held purchases within minutes, like the service does for decoys.
      for (const plan of ownerPlans.filter((p) => p.at <= svc.clock.now())) {
        ownerPlans.splice(ownerPlans.indexOf(plan), 1);
        if (plan.outcome === 'none') continue;
        await svc.app.inject({
          method: 'POST',
          url: `/api/v1/owner/approvals/${plan.id}/${plan.outcome}`,
          headers: plan.w.owner.auth,
        });
      }
      await processDueConfirmations(svc.ctx);
      for (const p of [...pending]) {
        const res = await poll(svc, p.w.bot, p.id);
        const body = res.json();
        if (body.status === 'pending' && p.polled) continue;
        p.polled = true;
        seen.push({ kind: p.kind, what: `poll:${body.status}`, status: res.statusCode, body });
        if (body.status !== 'pending') pending.splice(pending.indexOf(p), 1);
      }
      for (const w of worlds) {
        for (let i = 0; i < 4; i++) {
          const res = await svc.app.inject({
            method: 'POST',
            url: '/api/v1/bot/tasks/next',
            headers: w.bot.auth,
          });
          const task = res.json();
          if (!task.has_task) break;
          const kind = await kindOf(task.task_id);
          seen.push({ kind, what: 'next', status: res.statusCode, body: task });
          // Asking again before acting returns the same task (the lease), for both kinds.
          const again = await svc.app.inject({
            method: 'POST',
            url: '/api/v1/bot/tasks/next',
            headers: w.bot.auth,
          });
          seen.push({ kind, what: 'next-again', status: again.statusCode, body: again.json() });
          expect(again.json().task_id).toBe(task.task_id);
          const c = await checkout(svc, w.bot, { ...task.instructions, task_id: task.task_id });
          const cb = c.json();
          seen.push({ kind, what: `checkout:${c.statusCode}`, status: c.statusCode, body: cb });
          // A mistaken checkout (wrong amount) is refused alike.
          if (randomInt(10) === 0) {
            const wrong = await checkout(svc, w.bot, {
              ...task.instructions,
              amount_cents: task.instructions.amount_cents + 1,
              task_id: task.task_id,
            });
            seen.push({ kind, what: 'checkout:mismatch', status: wrong.statusCode, body: wrong.json() });
          }
          if (c.statusCode === 202) {
            // The bot polls at once (pending), then on later rounds until decided.
            const first = await poll(svc, w.bot, cb.confirmation_id);
            seen.push({
              kind,
              what: `poll:${first.json().status}`,
              status: first.statusCode,
              body: first.json(),
            });
            pending.push({ w, id: cb.confirmation_id, kind, polled: true });
            if (kind === 'real') {
              const roll = randomInt(100);
              ownerPlans.push({
                w,
                id: cb.confirmation_id,
                at: svc.clock.now() + randomInt(20_000, 600_000),
                outcome: roll < 5 ? 'none' : roll < 15 ? 'deny' : 'approve',
              });
            }
          }
        }
      }
    }
    for (const w of worlds) {
      const rows = await svc.ctx.db.query<{ body: string }>(
        "SELECT body FROM events WHERE bot_id = $1 AND type IN ('task.available', 'purchase.approved', 'purchase.denied', 'purchase.expired')",
        [w.bot.bot_id],
      );
      for (const r of rows) {
        const body = JSON.parse(r.body);
        const id = (body.data.task_id ?? null) as string | null;
        const kind: Kind = id
          ? await kindOf(id)
          : (
                await svc.ctx.db.query<{ is_real: boolean }>(
                  'SELECT is_real FROM checkout_confirmations WHERE id = $1',
                  [body.data.checkout_id],
                )
              )[0]!.is_real
            ? 'real'
            : 'decoy';
        eventsSeen.push({ kind, what: body.event, status: 0, body });
      }
    }
    const count = (kind: Kind, what: string) => seen.filter((s) => s.kind === kind && s.what === what).length;
    // Enough of each to compare: a few hundred tasks, both kinds, held and immediate checkouts.
    expect(count('real', 'next') + count('decoy', 'next')).toBeGreaterThan(200);
    for (const kind of ['real', 'decoy'] as const) {
      expect(count(kind, 'next'), kind).toBeGreaterThan(40);
      // A task's purchase is approved by its schedule (the owner's or a shadow's alike), whatever
      // the card's approval mode: never held (docs/tasks.md).
      expect(count(kind, 'checkout:200'), kind).toBeGreaterThan(40);
      expect(count(kind, 'checkout:202'), kind).toBe(0);
    }
  }, 300_000);

  it('every kind of response has the same status code and type signature for decoys and real tasks', () => {
    const groups = new Map<string, Map<Kind, Set<string>>>();
    for (const s of seen) {
      const g = groups.get(s.what) ?? new Map<Kind, Set<string>>();
      const set = g.get(s.kind) ?? new Set<string>();
      set.add(`${s.status} ${signature(s.body)}`);
      g.set(s.kind, set);
      groups.set(s.what, g);
    }
    for (const [what, g] of groups) {
      const real = g.get('real');
      const decoy = g.get('decoy');
      // Rare outcomes (a denial, an expiry, a mismatch) may be missing from one side by chance;
      // wherever both sides have them, they must be identical.
      if (!real || !decoy) continue;
      expect([...decoy].sort(), what).toEqual([...real].sort());
    }
    expect(groups.get('next')?.get('real')?.size).toBe(1);
  });

  it('no categorical value separates them: task type, statuses, approvals, messages', () => {
    const values = (kind: Kind, what: string, pick: (b: Record<string, unknown>) => unknown) =>
      new Set(
        seen
          .filter((s) => s.kind === kind && s.what.startsWith(what))
          .map((s) => JSON.stringify(pick(s.body))),
      );
    const template = (m: unknown) =>
      String(m)
        .replace(/"[^"]*"/g, '"…"')
        .replace(/from .* for \$[\d.]+ with payment profile \d/, 'from … for $… with payment profile …');
    for (const [what, pick] of [
      ['next', (b: Record<string, unknown>) => [b.has_task, b.task_type, template(b.message)]],
      ['checkout:200', (b: Record<string, unknown>) => [b.approved, b.message]],
      ['checkout:202', (b: Record<string, unknown>) => [b.approved, b.status, b.message]],
      ['poll:approved', (b: Record<string, unknown>) => [b.status, b.message]],
      ['poll:pending', (b: Record<string, unknown>) => [b.status, b.message]],
    ] as const) {
      expect(values('decoy', what, pick), what).toEqual(values('real', what, pick));
    }
    // A held purchase waits the same 15 minutes either way.
    for (const s of seen.filter((x) => x.what === 'checkout:202')) {
      expect(typeof s.body.expires_at).toBe('string');
    }
  });

  it('task ids and merchant URLs have the same shape and name nothing about decoys', () => {
    const FORBIDDEN = /decoy|fake|dummy|honeypot|test/i;
    const serviceHost = new URL(BASE_URL).host;
    for (const s of seen.filter((x) => x.what === 'next')) {
      const body = s.body as { task_id: string; instructions: Record<string, unknown> };
      expect(body.task_id).toMatch(/^task_[a-z2-7]{16}$/);
      const url = new URL(body.instructions.merchant_url as string);
      expect(url.protocol).toBe('https:');
      expect(url.host).not.toBe(serviceHost);
      expect(`${url.host}${url.pathname}`).not.toMatch(FORBIDDEN);
      expect(String(body.instructions.merchant_name)).not.toMatch(FORBIDDEN);
      expect(String(body.instructions.item_name)).not.toMatch(FORBIDDEN);
      expect(Number.isInteger(body.instructions.amount_cents)).toBe(true);
      expect(typeof body.instructions.category).toBe('string');
    }
  });

  it('events (task.available, purchase.*) have the same shape for both', () => {
    const sigs = (kind: Kind, type: string) =>
      new Set(
        eventsSeen
          .filter((e) => e.kind === kind && e.what === type)
          .map((e) => signature({ ...e.body, data: e.body.data })),
      );
    for (const type of ['task.available', 'purchase.approved']) {
      expect(sigs('decoy', type).size, type).toBeGreaterThan(0);
      expect(sigs('decoy', type), type).toEqual(sigs('real', type));
    }
    const descriptions = (kind: Kind) =>
      new Set(
        eventsSeen
          .filter((e) => e.kind === kind && e.what === 'task.available')
          .map((e) => (e.body.data as Record<string, unknown>).description),
      );
    expect(descriptions('decoy')).toEqual(descriptions('real'));
  });
});
