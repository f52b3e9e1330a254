import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csrfIn, signIn } from '../dashboard/browserless.ts';
import { isPostgres } from '../support/db.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';

// Issue 33, item 2: an Idempotency-Key on the owner calls that move money or decide (funding,
// top-up approval and decline, manual webhook retry), with a checkout's semantics: the same key and
// request replay the first answer, another request with the key is 409, a refused call keeps
// nothing, and concurrent calls with one key make one change (PostgreSQL, many in parallel; the
// ledger is checked afterwards). The crash side (SIGKILL during fundings, then every unanswered one
// retried with its key) is test/scale/fundingCrash.test.ts.

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService();
});
afterAll(async () => {
  await svc.close();
});

const fund = (owner: TestOwner, botId: string, cents: number, key?: string) =>
  svc.app.inject({
    method: 'POST',
    url: `/api/v1/owner/bots/${botId}/wallet/fund`,
    headers: { ...owner.auth, ...(key === undefined ? {} : { 'idempotency-key': key }) },
    payload: { amount_cents: cents },
  });

async function fundings(botId: string): Promise<{ n: number; cents: number }> {
  const [row] = await svc.ctx.db.query<{ n: number; cents: number }>(
    `SELECT count(DISTINCT t.id)::int AS n, (coalesce(sum(e.amount_micros), 0) / 10000.0)::float8 AS cents
       FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id AND e.account = 'wallet_available'
      WHERE t.bot_id = $1 AND t.kind = 'funding'`,
    [botId],
  );
  return row!;
}

describe('Idempotency-Key on owner calls', () => {
  it('funding: the same key and amount replay the first answer; another amount or bot is 409', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const other = await activeBot(svc, owner);
    const first = await fund(owner, bot.bot_id, 700, 'fund-1');
    expect(first.statusCode, first.body).toBe(200);
    const again = await fund(owner, bot.bot_id, 700, 'fund-1');
    expect(again.statusCode).toBe(200);
    expect(again.json()).toEqual(first.json());
    expect(await fundings(bot.bot_id)).toEqual({ n: 1, cents: 700 });

    const otherAmount = await fund(owner, bot.bot_id, 800, 'fund-1');
    expect(otherAmount.statusCode).toBe(409);
    expect(otherAmount.json().error).toBe('idempotency_conflict');
    const otherBot = await fund(owner, other.bot_id, 700, 'fund-1');
    expect(otherBot.json().error).toBe('idempotency_conflict');
    expect(await fundings(other.bot_id)).toEqual({ n: 0, cents: 0 });

    // Without a key each call funds; keys are the owner's own (another owner's same key is fresh).
    await fund(owner, bot.bot_id, 100);
    await fund(owner, bot.bot_id, 100);
    expect(await fundings(bot.bot_id)).toEqual({ n: 3, cents: 900 });
    const stranger = await createOwner(svc);
    const strangerBot = await activeBot(svc, stranger);
    expect((await fund(stranger, strangerBot.bot_id, 700, 'fund-1')).statusCode).toBe(200);
  });

  it('a refused call keeps nothing: the key works afterwards', async () => {
    const owner = await createOwner(svc);
    const mallory = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const foreign = await fund(mallory, bot.bot_id, 500, 'k');
    expect(foreign.statusCode).toBe(404);
    const refused = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: { ...owner.auth, 'idempotency-key': 'k2' },
      payload: { amount_cents: 0 },
    });
    expect(refused.statusCode).toBe(400);
    const mine = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/owner/bots/bot_aaaaaaaaaaaaaaaa/wallet/fund',
      headers: { ...owner.auth, 'idempotency-key': 'k3' },
      payload: { amount_cents: 500 },
    });
    expect(mine.statusCode).toBe(404);
    expect((await fund(owner, bot.bot_id, 500, 'k3')).statusCode).toBe(200);
    const keys = await svc.ctx.db.query('SELECT key FROM owner_idempotency WHERE owner_id = $1', [owner.id]);
    expect(keys).toEqual([{ key: 'k3' }]);
    // A key longer than 255 characters is refused before any work.
    const long = await fund(owner, bot.bot_id, 500, 'x'.repeat(256));
    expect(long.statusCode).toBe(400);
    expect(await fundings(bot.bot_id)).toEqual({ n: 1, cents: 500 });
  });

  it('top-up approval: a retry with the key replays the approval (without one it is 409 not_pending)', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const ask = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bot/wallet/topup-requests',
      headers: bot.auth,
      payload: { amount_cents: 1500, reason: 'groceries' },
    });
    expect(ask.statusCode, ask.body).toBe(201);
    const approve = (key?: string, amount?: number) =>
      svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/topup-requests/${ask.json().topup_id}/approve`,
        headers: { ...owner.auth, ...(key ? { 'idempotency-key': key } : {}) },
        payload: amount === undefined ? {} : { amount_cents: amount },
      });
    const first = await approve('approve-1');
    expect(first.statusCode, first.body).toBe(200);
    const replay = await approve('approve-1');
    expect(replay.statusCode).toBe(200);
    expect(replay.json()).toEqual(first.json());
    expect((await approve('approve-1', 900)).json().error).toBe('idempotency_conflict');
    expect((await approve()).json().error).toBe('not_pending');
    expect(await fundings(bot.bot_id)).toEqual({ n: 1, cents: 1500 });
  });

  it('manual webhook retry: a repeated call with the key queues one retry and answers it again', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 100 });
    const [delivery] = await svc.ctx.db.query<{ id: string }>(
      `UPDATE webhook_deliveries SET status = 'failed', attempts = 6 WHERE bot_id = $1 RETURNING id`,
      [bot.bot_id],
    );
    const retry = () =>
      svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/webhook-deliveries/${delivery!.id}/retry`,
        headers: { ...owner.auth, 'idempotency-key': 'retry-1' },
      });
    const first = await retry();
    expect(first.statusCode, first.body).toBe(200);
    svc.clock.advance(1000);
    const second = await retry();
    expect(second.json()).toEqual(first.json());
    const audit = await svc.ctx.db.query(
      `SELECT 1 FROM audit_log WHERE bot_id = $1 AND action = 'webhook_delivery.retried'`,
      [bot.bot_id],
    );
    expect(audit).toHaveLength(1);
  });

  it('the dashboard funding form carries a key: submitted twice, it funds once', async () => {
    const owner = await createOwner(svc, 'dash-fund@example.com');
    const bot = await activeBot(svc, owner);
    const browser = await signIn(svc, 'dash-fund@example.com', '10.62.0.1');
    const page = await browser.get(`/bots/${bot.bot_id}`);
    const action = `/bots/${bot.bot_id}/fund`;
    const key = /name="idempotency_key" value="([0-9a-f]{32})"/.exec(page.body)?.[1];
    expect(key).toBeDefined();
    const form = { _csrf: csrfIn(page.body, action), idempotency_key: key!, amount_usd: '12.50' };
    expect((await browser.post(action, form)).statusCode).toBe(303);
    expect((await browser.post(action, form)).statusCode).toBe(303);
    expect(await fundings(bot.bot_id)).toEqual({ n: 1, cents: 1250 });
    // The next page shown has a new key: a new funding.
    const next = await browser.get(`/bots/${bot.bot_id}`);
    expect(/name="idempotency_key" value="([0-9a-f]{32})"/.exec(next.body)?.[1]).not.toBe(key);
  });

  it.runIf(isPostgres)(
    'concurrent calls with one key make one funding; with distinct keys, one each (PostgreSQL)',
    async () => {
      const owner = await createOwner(svc);
      const bot = await activeBot(svc, owner);
      const same = await Promise.all(
        Array.from({ length: 60 }, () => fund(owner, bot.bot_id, 250, 'same-key')),
      );
      const statuses = same.map((r) => r.statusCode);
      expect(statuses.filter((s) => s === 200)).toHaveLength(60);
      expect(new Set(same.map((r) => r.json().funding_id)).size).toBe(1);
      expect(await fundings(bot.bot_id)).toEqual({ n: 1, cents: 250 });

      const distinct = await Promise.all(
        Array.from({ length: 40 }, (_, i) => fund(owner, bot.bot_id, 10 + i, `key-${i}`)),
      );
      expect(distinct.every((r) => r.statusCode === 200)).toBe(true);
      // Their same keys again, in parallel with themselves: still one funding per key.
      await Promise.all(Array.from({ length: 40 }, (_, i) => fund(owner, bot.bot_id, 10 + i, `key-${i}`)));
      const expected = 250 + Array.from({ length: 40 }, (_, i) => 10 + i).reduce((a, b) => a + b, 0);
      expect(await fundings(bot.bot_id)).toEqual({ n: 41, cents: expected });
      // The ledger balances and the wallet holds what the fundings put in.
      const [wallet] = await svc.ctx.db.query<{ available_micros: number }>(
        'SELECT available_micros FROM wallets WHERE bot_id = $1',
        [bot.bot_id],
      );
      expect(Number(wallet!.available_micros)).toBe(expected * 10_000);
      const [unbalanced] = await svc.ctx.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM (SELECT transaction_id FROM ledger_entries GROUP BY transaction_id
           HAVING sum(amount_micros) <> 0) x`,
      );
      expect(unbalanced!.n).toBe(0);
    },
    60_000,
  );
});
