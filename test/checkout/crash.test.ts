import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionFor, createTestDatabase, isPostgres, type TestDatabase } from '../support/db.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  TEST_SECRET_KEY,
  type TestOwner,
  type TestService,
  giveGenerousBudgets,
} from '../support/service.ts';
import {
  type Bot,
  expectLedgerConsistent,
  purchase,
  putProfile,
  setupCard,
  type TestCard,
} from './helpers.ts';
import { freePort } from '../support/process.ts';

// A real service process (bin/botpay.mjs serve) is SIGKILLed in the middle of a stream of
// checkouts and started again. Afterwards the ledger must balance to the cent and every approved
// confirmation must have exactly one debit (purchase or capture), every pending one one hold.

async function startChild(schema: string, port: number): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['bin/botpay.mjs', 'serve'], {
    env: {
      ...process.env,
      DATABASE_URL: connectionFor(schema),
      SECRET_KEY: TEST_SECRET_KEY,
      PORT: String(port),
      HOST: '127.0.0.1',
      BASE_URL: `http://127.0.0.1:${port}`,
      ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
      CHECKOUT_RATE_LIMIT_PER_HOUR: '100000',
      ROLES: 'api',
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`http://127.0.0.1:${port}/readyz`);
      if (res.ok) return child;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill('SIGKILL');
  throw new Error('child service did not become ready');
}

describe.runIf(isPostgres)('checkout crash safety (PostgreSQL, SIGKILL)', () => {
  let database: TestDatabase;
  let svc: TestService;
  let owner: TestOwner;
  const children: ChildProcess[] = [];
  beforeAll(async () => {
    database = await createTestDatabase();
    svc = await createTestService({ database, env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
    owner = await createOwner(svc);
    await giveGenerousBudgets(svc, owner);
  });
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    await svc.close();
    await database.drop();
  });

  it('balances to the cent after a SIGKILL mid-stream', async () => {
    const bots: Array<{ bot: Bot; card: TestCard }> = [];
    for (let i = 0; i < 4; i++) {
      const bot = await activeBot(svc, owner, { fundCents: 100_000 });
      const card = await setupCard(svc, owner, bot.bot_id, {
        approval_mode: 'auto_approve_under_threshold',
        approval_threshold_cents: 150,
        per_transaction_cents: 10_000,
        daily_cents: 10_000_000,
        monthly_cents: 10_000_000,
      });
      await putProfile(svc, owner, bot.bot_id, card.card_id, card.real_profile_index, {
        allowance_cents: 10_000_000,
      });
      bots.push({ bot, card });
    }
    const port = await freePort();
    let child = await startChild(database.schema!, port);
    children.push(child);

    let sent = 0;
    let answered = 0;
    let stop = false;
    // 16 concurrent streams of checkouts (real and decoy, approved at once or held).
    const stream = async (n: number) => {
      const { bot, card } = bots[n % bots.length]!;
      while (!stop) {
        sent++;
        const amount = 50 + ((sent * 37) % 200); // under 150 approved at once, above held
        const profile = sent % 3 === 0 ? card.decoyIndex : card.real_profile_index;
        try {
          const res = await fetch(`http://127.0.0.1:${port}/api/v1/bot/merchant/checkout`, {
            method: 'POST',
            headers: { ...bot.auth, 'content-type': 'application/json' },
            body: JSON.stringify(purchase(profile, amount)),
          });
          await res.text();
          if (res.status >= 500) throw new Error(`5xx before the crash: ${res.status}`);
          answered++;
        } catch (error) {
          if (error instanceof Error && error.message.startsWith('5xx')) throw error;
          await new Promise((r) => setTimeout(r, 20)); // connection refused while down
        }
      }
    };
    const streams = Array.from({ length: 16 }, (_, i) => stream(i));
    while (answered < 150) await new Promise((r) => setTimeout(r, 10));
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const atCrash = answered;
    child = await startChild(database.schema!, port);
    children.push(child);
    while (answered < atCrash + 100) await new Promise((r) => setTimeout(r, 10));
    stop = true;
    await Promise.all(streams);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));

    const db = svc.ctx.db;
    for (const { bot, card } of bots) {
      await expectLedgerConsistent(svc, bot.bot_id);
      const rows = await db.query<{
        id: string;
        status: string;
        is_real: boolean;
        amount_micros: number;
        kinds: string[] | null;
      }>(
        `SELECT c.id, c.status, c.is_real, c.amount_micros,
                (SELECT array_agg(t.kind ORDER BY t.kind) FROM ledger_transactions t WHERE t.reference = c.id) AS kinds
           FROM checkout_confirmations c WHERE c.bot_id = $1`,
        [bot.bot_id],
      );
      expect(rows.length).toBeGreaterThan(20);
      let spent = 0;
      for (const r of rows) {
        if (!r.is_real) {
          // Decoys write memo rows of the decoy reserve, never money.
          expect(['decoy_purchase', 'decoy_hold']).toContain(r.kinds?.[0]);
          continue;
        }
        if (r.status === 'approved') expect(r.kinds).toEqual(['purchase']);
        else expect(r.kinds).toEqual(['hold']);
        spent += r.amount_micros;
      }
      // No money moved without a confirmation.
      const orphans = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ledger_transactions t WHERE t.bot_id = $1 AND t.kind NOT IN ('funding', 'decoy_return')
            AND NOT EXISTS (SELECT 1 FROM checkout_confirmations c WHERE c.id = t.reference)`,
        [bot.bot_id],
      );
      expect(orphans[0]!.n).toBe(0);
      const ledger = await expectLedgerConsistent(svc, bot.bot_id);
      expect(100_000 * 10_000 - ledger.available_micros).toBe(spent);
      const counter = await db.query<{ s: number }>(
        `SELECT coalesce(sum(day_micros), 0)::bigint AS s FROM spend_windows WHERE scope = $1`,
        [`card:${card.card_id}`],
      );
      expect(Number(counter[0]!.s)).toBe(spent);
    }
  }, 120_000);
});
