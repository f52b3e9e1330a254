import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import { expectLedgerConsistent, wallet } from '../checkout/helpers.ts';
import { createTestDatabase, isPostgres, POSTGRES_URL, type TestDatabase } from '../support/db.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { ask, decide, pendingTopups } from './helpers.ts';

// Races on the leg's database (PostgreSQL runs them truly in parallel on a pool of connections):
// parallel asks never pass the limits, an approve and a decline of the same request decide it
// once, and a change made by another instance reaches this one's status cache through NOTIFY.

let database: TestDatabase;
let svc: TestService;
beforeAll(async () => {
  database = await createTestDatabase({ poolSize: 20 });
  svc = await createTestService({
    database,
    env: { TOPUP_REQUESTS_PER_DAY: '5', TOPUP_REQUESTS_OPEN_MAX: '50', STATUS_CACHE_MS: '60000' },
  });
});
afterAll(async () => {
  await svc.close();
  await database.drop();
});

describe('parallel asks', () => {
  it('40 parallel asks against 5 a day: exactly 5 created, the rest 429', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => ask(svc, bot, { amount_cents: 100 + i, reason: `parallel ${i}` })),
    );
    const codes = results.map((r) => r.statusCode);
    expect(codes.filter((c) => c === 201)).toHaveLength(5);
    expect(codes.filter((c) => c === 429)).toHaveLength(35);
    const rows = await svc.ctx.db.query('SELECT id FROM topup_requests WHERE bot_id = $1', [bot.bot_id]);
    expect(rows).toHaveLength(5);
  });

  it('40 parallel asks against 3 open at once: exactly 3 open', async () => {
    const other = await createTestService({
      database,
      env: { TOPUP_REQUESTS_PER_DAY: '1000', TOPUP_REQUESTS_OPEN_MAX: '3' },
    });
    try {
      const owner = await createOwner(other);
      const bot = await activeBot(other, owner);
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) => ask(other, bot, { amount_cents: 100 + i, reason: `open ${i}` })),
      );
      expect(results.filter((r) => r.statusCode === 201)).toHaveLength(3);
      expect(results.filter((r) => r.statusCode === 429)).toHaveLength(37);
      expect(await pendingTopups(other, bot)).toEqual({ check: 3, status: 3 });
    } finally {
      await other.close();
    }
  });

  it('parallel identical asks make one request', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const results = await Promise.all(
      Array.from({ length: 5 }, () => ask(svc, bot, { amount_cents: 700, reason: 'same' })),
    );
    expect(results.map((r) => r.statusCode).sort()).toEqual([200, 200, 200, 200, 201]);
    expect(new Set(results.map((r) => r.json().topup_id)).size).toBe(1);
  });
});

describe('decided once', () => {
  it('approve and decline of the same request at once: one wins, the other is 409, the wallet is funded at most once', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    for (let round = 0; round < 4; round++) {
      const asked = (await ask(svc, bot, { amount_cents: 1000, reason: `round ${round}` })).json();
      const before = (await wallet(svc, bot.bot_id)).available_micros;
      const [approve, decline, approveAgain] = await Promise.all([
        decide(svc, owner, asked.topup_id, 'approve'),
        decide(svc, owner, asked.topup_id, 'decline'),
        decide(svc, owner, asked.topup_id, 'approve'),
      ]);
      const codes = [approve.statusCode, decline.statusCode, approveAgain.statusCode];
      expect(codes.filter((c) => c === 200)).toHaveLength(1);
      expect(codes.filter((c) => c === 409)).toHaveLength(2);
      const won = [approve, decline, approveAgain].find((r) => r.statusCode === 200)!.json().status;
      const after = (await wallet(svc, bot.bot_id)).available_micros;
      expect(after - before).toBe(won === 'approved' ? 1000 * 10_000 : 0);
      const row = (
        await svc.ctx.db.query<{ status: string }>('SELECT status FROM topup_requests WHERE id = $1', [
          asked.topup_id,
        ])
      )[0]!;
      expect(row.status).toBe(won);
    }
    await expectLedgerConsistent(svc, bot.bot_id);
    const approvedEvents = await svc.ctx.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM events WHERE bot_id = $1 AND type IN ('wallet.topup_approved', 'wallet.topup_declined')`,
      [bot.bot_id],
    );
    expect(approvedEvents[0]!.n).toBe(4);
  });
});

describe('status cache', () => {
  it('a request changed by another instance reaches this instance at once (trigger on topup_requests)', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    expect(await pendingTopups(svc, bot)).toEqual({ check: 0, status: 0 });
    // Read our own write at once (TTL is a minute here).
    const asked = (await ask(svc, bot, { amount_cents: 500, reason: 'cache' })).json();
    expect(await pendingTopups(svc, bot)).toEqual({ check: 1, status: 1 });
    // Another instance changes only the request row (no event, no wallet change): only the
    // topup_requests trigger can tell this instance.
    const db = isPostgres
      ? await openPostgres({ connectionString: POSTGRES_URL, schema: database.schema!, max: 2 })
      : svc.ctx.db;
    try {
      await db.query(`UPDATE topup_requests SET status = 'expired', decided_at = now() WHERE id = $1`, [
        asked.topup_id,
      ]);
      const started = Date.now();
      let seen = { check: -1, status: -1 };
      while (Date.now() - started < 5000) {
        seen = await pendingTopups(svc, bot);
        if (seen.check === 0 && seen.status === 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(seen).toEqual({ check: 0, status: 0 });
    } finally {
      if (db !== svc.ctx.db) await db.close();
    }
  });
});
