import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS_CHANNEL, emitEvent } from '../../src/events/outbox.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import { connectionFor, isPostgres } from '../support/db.ts';
import { createTestService, registerBot, type TestService } from '../support/service.ts';

// Notifications are announced inside transactions and sent after COMMIT (botpay_notify, 0001):
// a notifying commit would otherwise hold PostgreSQL's global notify lock through its WAL flush.
describe.runIf(isPostgres)('NOTIFY after commit on PostgreSQL', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('sessions defer notifications, also when the URL carries its own options', async () => {
    const [row] = await svc.ctx.db.query<{ v: string }>(
      `SELECT current_setting('botpay.defer_notify', true) AS v`,
    );
    expect(row?.v).toBe('on');
    const viaUrl = await openPostgres({ connectionString: connectionFor(svc.database.schema!), max: 1 });
    try {
      const [r] = await viaUrl.query<{ v: string; path: string }>(
        `SELECT current_setting('botpay.defer_notify', true) AS v, current_setting('search_path') AS path`,
      );
      expect(r).toEqual({ v: 'on', path: svc.database.schema });
    } finally {
      await viaUrl.close();
    }
  });

  it('a notification is sent after the commit, and not for a rolled-back transaction', async () => {
    // An unclaimed bot: its registration emitted no event, so no earlier notification names it.
    const bot = await registerBot(svc);
    const seen: string[] = [];
    const stop = await svc.ctx.db.listen(EVENTS_CHANNEL, (payload) => {
      for (const id of payload.split(',')) if (id === bot.bot_id) seen.push(id);
    });
    try {
      await svc.ctx.db
        .transaction(async (tx) => {
          await emitEvent(tx, { botId: bot.bot_id, type: 'rails.updated', data: {}, at: svc.clock.now() });
          throw new Error('roll back');
        })
        .catch(() => {});
      await svc.ctx.db.transaction(async (tx) => {
        await emitEvent(tx, { botId: bot.bot_id, type: 'rails.updated', data: {}, at: svc.clock.now() });
        // Nothing has been sent while the transaction is open.
        await new Promise((r) => setTimeout(r, 100));
        expect(seen).toEqual([]);
      });
      const deadline = Date.now() + 2000;
      while (!seen.includes(bot.bot_id) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect(seen).toEqual([bot.bot_id]);
    } finally {
      await stop();
    }
  });
});
