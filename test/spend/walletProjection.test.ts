import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Queryable } from '../../src/platform/db/port.ts';
import { newId } from '../../src/platform/ids.ts';
import { type SpendParams, spendInTransaction } from '../../src/spend/run.ts';
import { postLedger } from '../../src/wallet/ledger.ts';
import { expectLedgerConsistent, setupCard, type TestCard } from '../checkout/helpers.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

// spend_run writes its purchase's wallet projection itself, and its one INSERT of entries runs with
// botpay.ledger_by = 'spend_run', for which neither the projection trigger nor the balance check is
// called (migration 0055). The wallet row is then written once per purchase, real or decoy, approved
// or held, with the sums the entries add (wallets = ledger), and the setting ends with that INSERT:
// any later entries of the same transaction are projected and checked as every other writer's.

describe('spend_run projects its own entries, and only them', () => {
  let svc: TestService;
  let botId: string;
  let card: TestCard;
  beforeAll(async () => {
    svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
    const owner = await createOwner(svc);
    await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: owner.auth,
      payload: {
        per_transaction_cents: 100_000,
        daily_budget_cents: 10_000_000,
        monthly_budget_cents: 100_000_000,
      },
    });
    botId = (await activeBot(svc, owner, { fundCents: 100_000 })).bot_id;
    // Under $10 approved at once, at or above held.
    card = await setupCard(svc, owner, botId, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 1000,
      per_transaction_cents: 100_000,
      daily_cents: 10_000_000,
      monthly_cents: 100_000_000,
    });
  });
  afterAll(async () => {
    await svc.close();
  });

  function params(profileIndex: number, amountMicros: number): SpendParams {
    return {
      botId,
      method: { kind: 'card', cardId: card.card_id, profileIndex },
      amountMicros,
      category: 'retail',
      confirmationId: newId('chk'),
      merchantName: 'Acme',
      merchantUrl: 'https://acme.example/',
      itemName: 'A book',
      taskId: null,
      now: svc.clock.now(),
      approvalWindowSeconds: 900,
      ledgerTransactionId: newId('ltx'),
      eventId: newId('evt'),
      eventBody: '{}',
      rateKey: `projection:${botId}`,
      rateLimit: 100_000,
      idempotencyKey: null,
      requestHash: null,
    };
  }

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
});
