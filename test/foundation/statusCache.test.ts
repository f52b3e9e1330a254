import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import { createTestDatabase, isPostgres, POSTGRES_URL, type TestDatabase } from '../support/db.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

// Status answers are cached per instance (STATUS_CACHE_MS); a long TTL here proves that changes
// invalidate them rather than the clock.
describe('bot status cache', () => {
  let database: TestDatabase;
  let a: TestService;
  let b: TestService;
  beforeAll(async () => {
    database = await createTestDatabase();
    a = await createTestService({ database, env: { STATUS_CACHE_MS: '60000' } });
    // A second instance with its own connection pool on the same database (PostgreSQL), so only
    // NOTIFY can tell the first about its writes; with PGlite one process owns the data.
    if (isPostgres) {
      const db = await openPostgres({ connectionString: POSTGRES_URL, schema: database.schema!, max: 4 });
      b = await createTestService({
        database: { db, drop: () => db.close() },
        env: { STATUS_CACHE_MS: '60000' },
      });
    } else {
      b = a;
    }
  });
  afterAll(async () => {
    await a.close();
    if (b !== a) {
      await b.close();
      await b.database.drop();
    }
    await database.drop();
  });

  async function balanceOn(svc: TestService, auth: Record<string, string>): Promise<number> {
    return (await svc.app.inject({ url: '/api/v1/bot/status', headers: auth })).json().rails.card_wallet
      .balance_usd;
  }

  it('reads its own writes at once', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner, { fundCents: 100 });
    expect(await balanceOn(a, bot.auth)).toBe(1);
    await a.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 100 },
    });
    expect(await balanceOn(a, bot.auth)).toBe(2);
    const wallet = await a.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth });
    expect(wallet.json().balance_usd).toBe(2);
  });

  it("sees another instance's change long before the TTL (NOTIFY, not expiry)", async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner, { fundCents: 100 });
    expect(await balanceOn(a, bot.auth)).toBe(1);
    const started = Date.now();
    await b.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
      headers: owner.auth,
    });
    let status = '';
    while (Date.now() - started < 5000) {
      status = (await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).json().status;
      if (status === 'frozen') break;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(status).toBe('frozen');
    // Milliseconds normally; the bound only has to be far below the 60 s TTL on a loaded machine.
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('owner-wide changes (master guardrails) reach every bot of the owner', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner);
    expect(
      (await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).json().master_guardrails
        .daily_budget_usd,
    ).toBe(20);
    await b.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: owner.auth,
      payload: { daily_budget_cents: 4000 },
    });
    const deadline = Date.now() + 2000;
    let daily = 0;
    while (Date.now() < deadline) {
      daily = (await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).json().master_guardrails
        .daily_budget_usd;
      if (daily === 40) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(daily).toBe(40);
  });

  it('a key rotated on one instance stops working on the other within a second', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner);
    expect((await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).statusCode).toBe(200);
    const rotated = await b.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/api-key/rotate`,
      headers: owner.auth,
    });
    expect(rotated.statusCode).toBe(200);
    // The key cache keeps an entry for at most 900 ms: a second later the old key is refused.
    await new Promise((r) => setTimeout(r, 1000));
    expect((await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).statusCode).toBe(401);
  });
});
