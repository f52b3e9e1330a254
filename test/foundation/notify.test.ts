import pg from 'pg';
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

  it('notifications of concurrent commits are coalesced into fewer notifying statements, none lost', async () => {
    const bots = await Promise.all(Array.from({ length: 100 }, () => registerBot(svc)));
    const ids = new Set(bots.map((b) => b.bot_id));
    // A plain client of its own: the service's listener skips what its own pool sent.
    const listener = new pg.Client({ connectionString: connectionFor(svc.database.schema!) });
    await listener.connect();
    let messages = 0;
    const heard = new Set<string>();
    listener.on('notification', (msg) => {
      const mine = (msg.payload ?? '').split(',').filter((id) => ids.has(id));
      if (mine.length === 0) return;
      messages++;
      for (const id of mine) heard.add(id);
    });
    await listener.query(`LISTEN ${EVENTS_CHANNEL}`);
    try {
      await Promise.all(
        bots.map((bot) =>
          svc.ctx.db.transaction((tx) =>
            emitEvent(tx, { botId: bot.bot_id, type: 'rails.updated', data: {}, at: svc.clock.now() }),
          ),
        ),
      );
      const deadline = Date.now() + 5000;
      while (heard.size < ids.size && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect(heard.size).toBe(ids.size);
      // One statement per commit would be 100 notifications; commits that end while a statement is
      // in flight share the next one.
      expect(messages).toBeLessThan(80);
    } finally {
      await listener.end();
    }
  });
});
