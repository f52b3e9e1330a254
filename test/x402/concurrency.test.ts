import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { windowStart } from '../../src/platform/time.ts';
import { ledgerBalances } from '../../src/wallet/ledger.ts';
import { isPostgres } from '../support/db.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { creditDeposit, enableWallet, payRequest, requirement, walletRow, X402_ENV } from './helpers.ts';

// Real parallelism needs PostgreSQL (PGlite runs one transaction at a time).
describe.runIf(isPostgres)('x402 payments under concurrency (PostgreSQL)', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService({ env: { ...X402_ENV, CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
  });
  afterAll(async () => svc?.close());

  it('100 parallel payments against a $0.50 daily limit: exactly 10 of $0.05 pass, the rest are 403', async () => {
    const owner = await createOwner(svc);
    await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: owner.auth,
      payload: {
        per_transaction_cents: 100_000,
        daily_budget_cents: 1_000_000,
        monthly_budget_cents: 10_000_000,
      },
    });
    const bot = await activeBot(svc, owner);
    await enableWallet(svc, owner, bot.bot_id, {
      per_transaction_cents: 100,
      daily_cents: 50,
      monthly_cents: 100_000,
      approval_threshold_cents: 1000,
    });
    await creditDeposit(svc, bot.bot_id, 10_000);
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        payRequest(svc, bot, {
          resource_url: `https://api.example.com/item/${i}`,
          payment_requirements: [requirement({ amount: '50000' })],
        }),
      ),
    );
    const codes = new Map<number, number>();
    for (const r of results) {
      expect(r.statusCode, r.body).toBeLessThan(500);
      codes.set(r.statusCode, (codes.get(r.statusCode) ?? 0) + 1);
      if (r.statusCode === 403)
        expect(r.json()).toMatchObject({ error: 'rail_guardrail_violation', limit: 'daily' });
    }
    expect(codes.get(200)).toBe(10);
    expect(codes.get(403)).toBe(90);
    const nonces = new Set(
      results
        .filter((r) => r.statusCode === 200)
        .map((r) => r.json().payment_payload.payload.authorization.nonce),
    );
    expect(nonces.size).toBe(10);
    const w = await walletRow(svc, bot.bot_id);
    expect([Number(w.available_micros), Number(w.authorized_micros)]).toEqual(
      [10_000 - 50, 50].map((c) => c * 10_000),
    );
    const ledger = await ledgerBalances(svc.ctx.db, bot.bot_id);
    expect(ledger).toMatchObject({
      x402_available: 9950 * 10_000,
      x402_authorized: 50 * 10_000,
      x402_deposits: -10_000 * 10_000,
    });
    const day = await svc.ctx.db.query<{ spent_micros: string }>(
      `SELECT day_micros AS spent_micros FROM spend_windows WHERE scope = $1 AND day_start = $2`,
      [`x402:${bot.bot_id}`, windowStart('day', svc.clock.now())],
    );
    expect(Number(day[0]!.spent_micros)).toBe(50 * 10_000);
    const n = await svc.ctx.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM x402_payments WHERE bot_id = $1 AND status = 'authorized'`,
      [bot.bot_id],
    );
    expect(n[0]!.n).toBe(10);
  });

  it('40 parallel payments with one Idempotency-Key (and 10 with another body): paid once, every answer the same', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    await enableWallet(svc, owner, bot.bot_id, { approval_threshold_cents: 1000 });
    await creditDeposit(svc, bot.bot_id, 1000);
    const body = { resource_url: 'https://api.example.com/once', payment_requirements: [requirement()] };
    const other = { ...body, resource_url: 'https://api.example.com/twice' };
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        payRequest(svc, bot, i % 5 === 4 ? other : body, { 'idempotency-key': 'same-key' }),
      ),
    );
    const ok = results.filter((r) => r.statusCode === 200);
    const conflicts = results.filter((r) => r.statusCode === 409);
    // Whichever body came first pays; every later request with the other body conflicts.
    expect(ok.length + conflicts.length, results.map((r) => r.statusCode).join(',')).toBe(50);
    expect([10, 40]).toContain(ok.length);
    for (const r of ok) expect(r.json()).toEqual(ok[0]!.json());
    const payments = await svc.ctx.db.query<{ amount_micros: string }>(
      'SELECT amount_micros FROM x402_payments WHERE bot_id = $1',
      [bot.bot_id],
    );
    expect(payments).toHaveLength(1);
    const amount = Number(payments[0]!.amount_micros);
    const ledger = await ledgerBalances(svc.ctx.db, bot.bot_id);
    expect(ledger).toMatchObject({ x402_available: 1000 * 10_000 - amount, x402_authorized: amount });
    const w = await walletRow(svc, bot.bot_id);
    expect(Number(w.available_micros)).toBe(ledger.x402_available);
  });
});
