import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pgErrorCode } from '../../src/platform/db/port.ts';
import {
  debitPurchase,
  fundWallet,
  ledgerBalances,
  placeHold,
  postLedger,
  releaseHold,
} from '../../src/wallet/ledger.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

describe('double-entry ledger', () => {
  let svc: TestService;
  let botId: string;
  beforeAll(async () => {
    svc = await createTestService();
    botId = (await activeBot(svc, await createOwner(svc))).bot_id;
  });
  afterAll(async () => {
    await svc.close();
  });

  const wallet = async () =>
    (
      await svc.ctx.db.query<{ available_micros: number; held_micros: number }>(
        'SELECT available_micros, held_micros FROM wallets WHERE bot_id = $1',
        [botId],
      )
    )[0]!;

  it('keeps the wallet projection equal to the entries', async () => {
    await svc.ctx.db.transaction(async (tx) => {
      await fundWallet(tx, botId, 1000, svc.clock.now(), 'f1');
      await placeHold(tx, botId, 300, svc.clock.now(), 'h1');
      await debitPurchase(tx, botId, 200, svc.clock.now(), 'p1');
      await releaseHold(tx, botId, 300, svc.clock.now(), 'h1');
    });
    const w = await wallet();
    const l = await ledgerBalances(svc.ctx.db, botId);
    expect(w).toEqual({ available_micros: 800, held_micros: 0 });
    expect(l.wallet_available).toBe(800);
    expect(l.wallet_held).toBe(0);
    expect(l.wallet_available + l.wallet_held + l.owner_funding + l.merchant_settlement).toBe(0);
  });

  it('the database refuses a negative available balance and rolls the whole transaction back', async () => {
    const before = await wallet();
    const error = await svc.ctx.db
      .transaction((tx) => debitPurchase(tx, botId, before.available_micros + 1, svc.clock.now(), 'too-much'))
      .catch((e) => e);
    expect(pgErrorCode(error)).toBe('23514');
    expect(await wallet()).toEqual(before);
  });

  it('the database refuses an unbalanced transaction at commit', async () => {
    const before = await wallet();
    const error = await svc.ctx.db
      .transaction(async (tx) => {
        await tx.query(
          `INSERT INTO ledger_transactions (id, bot_id, kind, created_at) VALUES ('ltx_bad', $1, 'funding', now())`,
          [botId],
        );
        await tx.query(
          `INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_micros, created_at) VALUES ('ltx_bad', $1, 'wallet_available', 5000000, now())`,
          [botId],
        );
      })
      .catch((e) => e);
    expect(String(error)).toMatch(/not balanced/);
    expect(await wallet()).toEqual(before);
  });

  it('ledger rows are append-only', async () => {
    const error = await svc.ctx.db
      .query('UPDATE ledger_entries SET amount_micros = amount_micros * 2')
      .catch((e) => e);
    expect(String(error)).toMatch(/append-only/);
    const del = await svc.ctx.db.query('DELETE FROM ledger_entries').catch((e) => e);
    expect(String(del)).toMatch(/append-only/);
  });

  it('postLedger refuses unbalanced or fractional postings before touching the database', async () => {
    await expect(
      svc.ctx.db.transaction((tx) =>
        postLedger(tx, {
          botId,
          kind: 'funding',
          postings: [
            { account: 'wallet_available', amountMicros: 1.5 },
            { account: 'owner_funding', amountMicros: -1.5 },
          ],
          at: 0,
        }),
      ),
    ).rejects.toThrow(/non-integer/);
  });

  it('one money movement per kind and reference', async () => {
    await svc.ctx.db.transaction((tx) => fundWallet(tx, botId, 100, svc.clock.now(), 'once'));
    const error = await svc.ctx.db
      .transaction((tx) => fundWallet(tx, botId, 100, svc.clock.now(), 'once'))
      .catch((e) => e);
    expect(pgErrorCode(error)).toBe('23505');
  });
});
