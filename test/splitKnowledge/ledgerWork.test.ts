import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Queryable } from '../../src/platform/db/port.ts';
import { counterSpecs } from '../../src/checkout/guardrails.ts';
import { postLedger } from '../../src/wallet/ledger.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

// The same database work for the real profile and a decoy (src/migrations/functions/
// ledger_apply_entry.sql): each movement between real accounts and its decoy twin writes the wallet
// row as many times, so timing a purchase, hold, capture or release says nothing about which
// profile it was on. Counted with the transaction's own statistics (pg_stat_xact_user_tables).
// Broken if one side's account stops (or starts) writing the row, as a real hold once wrote it
// twice and a decoy hold once. Each movement writes the row once (its two entries are one INSERT).

const TWINS: Array<[string, [string, string], [string, string]]> = [
  ['purchase', ['wallet_available', 'merchant_settlement'], ['decoy_cover', 'decoy_spent']],
  ['hold', ['wallet_available', 'wallet_held'], ['decoy_cover', 'decoy_held']],
  ['capture', ['wallet_held', 'merchant_settlement'], ['decoy_held', 'decoy_spent']],
  ['release', ['wallet_held', 'wallet_available'], ['decoy_held', 'decoy_cover']],
];

describe('ledger work does not tell the real profile from a decoy', () => {
  let svc: TestService;
  let botId: string;
  beforeAll(async () => {
    svc = await createTestService();
    const owner = await createOwner(svc);
    botId = (await activeBot(svc, owner, { fundCents: 100_000 })).bot_id;
  });
  afterAll(async () => {
    await svc.close();
  });

  /** Wallet row writes made by posting one movement (rolled back: the figures stay as they were). */
  async function walletWrites(kind: string, [from, to]: [string, string]): Promise<number> {
    let writes = -1;
    const post = (tx: Queryable, k: string, a: string, b: string) =>
      postLedger(tx, {
        botId,
        kind: k as never,
        reference: `ref_${k}`,
        description: k,
        postings: [
          { account: a as never, amountMicros: -100 },
          { account: b as never, amountMicros: 100 },
        ],
        at: svc.clock.now(),
      });
    await svc.ctx.db
      .transaction(async (tx: Queryable) => {
        // A capture or release needs something held first.
        if (from === 'wallet_held') await post(tx, 'hold', 'wallet_available', 'wallet_held');
        if (from === 'decoy_held') await post(tx, 'decoy_hold', 'decoy_cover', 'decoy_held');
        const count = async () =>
          Number(
            (
              await tx.query<{ n: string }>(
                `SELECT coalesce(sum(n_tup_upd), 0) AS n FROM pg_stat_xact_user_tables
                  WHERE relname = 'wallets' AND schemaname = current_schema()`,
              )
            )[0]?.n ?? 0,
          );
        const before = await count();
        await post(tx, kind, from, to);
        writes = (await count()) - before;
        throw new Error('roll back');
      })
      .catch((error: Error) => {
        if (error.message !== 'roll back') throw error;
      });
    return writes;
  }

  it.each(TWINS)(
    '%s: the real movement and its decoy twin write the wallet row alike',
    async (kind, real, decoy) => {
      const r = await walletWrites(kind, real);
      const d = await walletWrites(`decoy_${kind}`, decoy);
      // Once per movement: the projection trigger runs per statement, not per entry (migration 0026).
      expect(r).toBe(1);
      expect(d).toBe(r);
    },
  );

  it('a released hold gives back the same counter rows on the real profile and on a decoy', () => {
    // decide and expire subtract a released hold from these (src/spend/holds.ts): one
    // statement per scope, so the same scopes and windows mean the same work, whichever profile
    // (a decoy once skipped the owner's row, and its expiry, settled in the bot's own poll, was quicker).
    const shape = (isReal: boolean) =>
      counterSpecs({
        botId: 'bot_a',
        ownerId: 'owner_a',
        cardId: 'card_a',
        profileIndex: 3,
        isReal,
        profileWindow: 'week',
      }).map((c) => `${c.name}:${c.kind}:${c.scope.split(':').length}`);
    const real = shape(true);
    const decoy = shape(false);
    expect(new Set(decoy.map((x) => x.split(':').slice(0, 2).join(':')))).toEqual(
      new Set(real.map((x) => x.split(':').slice(0, 2).join(':'))),
    );
    expect(decoy.length).toBe(real.length);
    // The decoy's owner row is its memo counter, which spend_run adds to: never the master budget.
    expect(
      counterSpecs({
        botId: 'b',
        ownerId: 'o',
        cardId: 'c',
        profileIndex: 2,
        isReal: false,
        profileWindow: 'week',
      })
        .filter((c) => c.name.startsWith('master'))
        .map((c) => c.scope),
    ).toEqual(['owner:o:decoy', 'owner:o:decoy']);
  });
});
