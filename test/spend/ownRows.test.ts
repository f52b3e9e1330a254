import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import type { Queryable } from '../../src/platform/db/port.ts';
import { newId, newTimeOrderedId } from '../../src/platform/ids.ts';
import { spendCall, spendInTransaction } from '../../src/spend/run.ts';
import { postLedger } from '../../src/wallet/ledger.ts';
import { expectLedgerConsistent, setupCard, type TestCard } from '../checkout/helpers.ts';
import { connectionFor, isPostgres } from '../support/db.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { botWithHoldingCard, spendParams } from './helpers.ts';

// spend_run does for its own rows what the triggers of their tables do for every other writer's
// (migration 0055): its INSERT of a purchase's entries and its INSERT of a card purchase's event run
// with botpay.written_by = 'spend_run', for which the insert triggers of ledger_entries and events
// are not called. So: the wallet row is written once per purchase, real or decoy, approved or held,
// with the sums the entries add (wallets = ledger); the event has the delivery and queue rows and
// the announcements the triggers would have made; and the setting ends with each statement, so any
// later rows of the same transaction go through the triggers as every other writer's.

describe('spend_run does the triggers’ work for its own rows, and only for them', () => {
  let svc: TestService;
  let botId: string;
  let card: TestCard;
  beforeAll(async () => {
    svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
    const made = await botWithHoldingCard(svc);
    botId = made.botId;
    card = made.card;
  });
  afterAll(async () => {
    await svc.close();
  });

  const params = (profileIndex: number, amountMicros: number) =>
    spendParams(
      svc,
      botId,
      { kind: 'card', cardId: card.card_id, profileIndex },
      amountMicros,
      `projection:${botId}`,
    );

  const walletUpdates = async (tx: Queryable) =>
    Number(
      (
        await tx.query<{ n: string }>(
          `SELECT coalesce(sum(n_tup_upd), 0) AS n FROM pg_stat_xact_user_tables
            WHERE relname = 'wallets' AND schemaname = current_schema()`,
        )
      )[0]?.n ?? 0,
    );

  /** The wallet row writes of one purchase (rolled back). */
  async function purchaseWrites(
    profileIndex: number,
    amountMicros: number,
  ): Promise<{ writes: number; held: boolean }> {
    let out = { writes: -1, held: false };
    await svc.ctx.db
      .transaction(async (tx) => {
        const before = await walletUpdates(tx);
        const a = await spendInTransaction(tx, params(profileIndex, amountMicros));
        expect(a.refused, JSON.stringify(a.r)).toBe(false);
        out = { writes: (await walletUpdates(tx)) - before, held: a.r.held === true };
        throw new Error('roll back');
      })
      .catch((error: Error) => {
        if (error.message !== 'roll back') throw error;
      });
    return out;
  }

  it.each([
    ['an approved', 1_000_000],
    ['a held', 20_000_000],
  ])('%s purchase writes the wallet row once on the real profile and on a decoy', async (mode, amount) => {
    const real = await purchaseWrites(card.real_profile_index, amount);
    const decoy = await purchaseWrites(card.decoyIndex, amount);
    expect(real.held).toBe(mode === 'a held');
    expect(decoy.held).toBe(real.held);
    expect(real.writes).toBe(1);
    expect(decoy.writes).toBe(real.writes);
  });

  it('each purchase moves the wallet by exactly its entries, real or decoy, approved or held', async () => {
    for (const [profile, amount] of [
      [card.real_profile_index, 1_000_000],
      [card.real_profile_index, 20_000_000],
      [card.decoyIndex, 1_000_000],
      [card.decoyIndex, 20_000_000],
    ] as const) {
      await svc.ctx.db.transaction(async (tx) => {
        const a = await spendInTransaction(tx, params(profile, amount));
        expect(a.refused, JSON.stringify(a.r)).toBe(false);
      });
      await expectLedgerConsistent(svc, botId);
    }
  });

  it('entries written after spend_run in the same transaction are projected and checked', async () => {
    const before = await expectLedgerConsistent(svc, botId);
    await svc.ctx.db.transaction(async (tx) => {
      const a = await spendInTransaction(tx, params(card.real_profile_index, 1_000_000));
      expect(a.refused).toBe(false);
      await postLedger(tx, {
        botId,
        kind: 'funding',
        reference: 'after-spend',
        description: 'funding after a purchase',
        postings: [
          { account: 'owner_funding', amountMicros: -3_000_000 },
          { account: 'wallet_available', amountMicros: 3_000_000 },
        ],
        at: svc.clock.now(),
      });
    });
    const after = await expectLedgerConsistent(svc, botId);
    expect(after.available_micros).toBe(before.available_micros - 1_000_000 + 3_000_000);

    // An unbalanced transaction after a purchase is still refused at commit.
    const unbalanced = svc.ctx.db.transaction(async (tx) => {
      const a = await spendInTransaction(tx, params(card.real_profile_index, 1_000_000));
      expect(a.refused).toBe(false);
      const id = newId('ltx');
      await tx.query(
        `INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at)
         VALUES ($1, $2, 'funding', $1, 'unbalanced', now())`,
        [id, botId],
      );
      await tx.query(
        `INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_micros, created_at)
         VALUES ($1, $2, 'wallet_available', 100, now())`,
        [id, botId],
      );
    });
    await expect(unbalanced).rejects.toThrow(/not balanced/);
    expect((await expectLedgerConsistent(svc, botId)).available_micros).toBe(after.available_micros);
  });

  /** A row as jsonb without the columns named (those that differ by event). */
  async function rowWithout(table: string, key: string, id: string, drop: string[]) {
    const rows = await svc.ctx.db.query<{ r: Record<string, unknown> | string }>(
      `SELECT to_jsonb(t) - $2::text[] AS r FROM ${table} t WHERE ${key} = $1`,
      [id, drop],
    );
    expect(rows.length).toBe(1);
    const r = rows[0]?.r;
    return typeof r === 'string' ? JSON.parse(r) : r;
  }

  it('an approved purchase’s event has the delivery and queue rows the trigger writes for any event', async () => {
    const p = params(card.real_profile_index, 1_000_000);
    await svc.ctx.db.transaction(async (tx) => {
      const a = await spendInTransaction(tx, p);
      expect(a.refused).toBe(false);
      expect(a.r.held).toBe(false);
    });
    const other = await svc.ctx.db.transaction((tx) =>
      emitEvent(tx, { botId, type: 'purchase.approved', data: {}, at: svc.clock.now() }),
    );
    const whd = (evt: string) => `whd_${evt.slice(evt.indexOf('_') + 1)}`;
    // Every column alike but the event's own: its id, sequence and time.
    const own = ['id', 'event_id', 'seq', 'created_at', 'next_attempt_at'];
    expect(await rowWithout('webhook_deliveries', 'id', whd(p.eventId as string), own)).toEqual(
      await rowWithout('webhook_deliveries', 'id', whd(other.id), own),
    );
    const queued = ['delivery_id', 'event_id', 'seq', 'due_at'];
    expect(await rowWithout('webhook_queue', 'delivery_id', whd(p.eventId as string), queued)).toEqual(
      await rowWithout('webhook_queue', 'delivery_id', whd(other.id), queued),
    );
    // And the event's own columns where the trigger puts them.
    const [row] = await svc.ctx.db.query<{ ok: boolean }>(
      `SELECT d.event_id = e.id AND d.seq = e.seq AND d.created_at = e.created_at AND d.next_attempt_at = e.created_at
              AND d.event_type = e.type AND q.event_id = e.id AND q.seq = e.seq AND q.due_at = e.created_at
              AND q.bot_id = e.bot_id AS ok
         FROM events e JOIN webhook_deliveries d ON d.event_id = e.id JOIN webhook_queue q ON q.delivery_id = d.id
        WHERE e.id = $1`,
      [p.eventId],
    );
    expect(row?.ok).toBe(true);
  });

  it.runIf(isPostgres)(
    'an approved purchase announces what the event triggers announce (PostgreSQL)',
    async () => {
      const schema = svc.database.schema;
      if (!schema) throw new Error('no schema');
      const client = new pg.Client({ connectionString: connectionFor(schema) });
      await client.connect();
      const notices: string[] = [];
      client.on('notice', (n) => notices.push(n.message ?? ''));
      try {
        await client.query("SET botpay.defer_notify = 'on'");
        const p = params(card.real_profile_index, 1_000_000);
        await client.query(
          `SELECT ${spendCall.sql} AS r`,
          spendCall.params({ ...p, lowBalanceMicros: null, announce: true }),
        );
        const spendNotices = [...notices];
        notices.length = 0;
        // Any other writer's event (src/events/outbox.ts writes the same statement).
        await client.query(
          "INSERT INTO events (id, bot_id, type, body, created_at) VALUES ($1, $2, 'purchase.approved', '{}', now())",
          [newTimeOrderedId('evt', svc.clock.now()), botId],
        );
        for (const n of notices) expect(spendNotices).toContain(n);
        expect(notices).toEqual(
          expect.arrayContaining([
            `botpay-notify botpay_events|${botId}`,
            `botpay-notify botpay_bot_state|bot:${botId}`,
          ]),
        );
      } finally {
        await client.end();
      }
    },
  );

  it.runIf(isPostgres)(
    'a wallet row gone while the purchase waits for its lock refuses the purchase, never loops (PostgreSQL)',
    async () => {
      // The funds step retries its UPDATE after reading the row under lock (a balance that grew
      // meanwhile); a row deleted meanwhile must end that with a refusal, not another round.
      const schema = svc.database.schema;
      if (!schema) throw new Error('no schema');
      const owner = await createOwner(svc);
      const other = (await activeBot(svc, owner, { fundCents: 10_000 })).bot_id;
      const otherCard = await setupCard(svc, owner, other, {
        approval_mode: 'auto_approve_under_threshold',
        approval_threshold_cents: 1000,
      });
      const holder = new pg.Client({ connectionString: connectionFor(schema) });
      const buyer = new pg.Client({ connectionString: connectionFor(schema) });
      await holder.connect();
      await buyer.connect();
      try {
        await holder.query('BEGIN');
        await holder.query('SELECT 1 FROM wallets WHERE bot_id = $1 FOR UPDATE', [other]);
        const buyerPid = (await buyer.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
        const p = { ...params(otherCard.real_profile_index, 100_000), botId: other };
        const purchase = buyer
          .query(
            `SELECT ${spendCall.sql} AS r`,
            spendCall.params({
              ...p,
              method: { kind: 'card', cardId: otherCard.card_id, profileIndex: otherCard.real_profile_index },
              lowBalanceMicros: null,
              announce: true,
            }),
          )
          .then(
            () => 'passed',
            (error: Error) => error.message,
          );
        // The purchase waits for the wallet row's lock (every step before it done).
        for (let i = 0; ; i++) {
          const r = await holder.query<{ waiting: boolean }>(
            "SELECT wait_event_type = 'Lock' AS waiting FROM pg_stat_activity WHERE pid = $1",
            [buyerPid],
          );
          if (r.rows[0]?.waiting) break;
          if (i > 500) throw new Error('the purchase never waited for the wallet row');
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        await holder.query('DELETE FROM wallets WHERE bot_id = $1', [other]);
        await holder.query('COMMIT');
        expect(JSON.parse(await purchase)).toEqual({ error: 'wallet_not_active' });
      } finally {
        await holder.end();
        await buyer.end();
      }
    },
    30_000,
  );
});
