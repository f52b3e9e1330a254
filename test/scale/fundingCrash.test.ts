import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.ts';
import { openDatabase } from '../../src/platform/db/open.ts';
import { isPostgres } from '../support/db.ts';
import { runCli, type ServiceProcess, startServiceProcess } from '../support/process.ts';
import { TEST_SECRET_KEY } from '../support/service.ts';

// Issue 33, item 2, the crash: 300 owner fundings, each with its own Idempotency-Key, sent to a real
// `botpay serve` on the embedded database, which is SIGKILLed once some have been answered. Before
// the key existed an owner could not tell which unanswered fundings had been booked (20 answered,
// 183 in the ledger after the restart). Now every unanswered funding is sent again, with its key,
// to the restarted service: each key ends with exactly one ledger funding, its answer's, and the
// ones answered before the crash replay the same answer.

const FUNDINGS = 300;
const STREAMS = 12;
const KILL_AFTER_ANSWERS = 20;

describe.runIf(!isPostgres)('owner fundings when the service is SIGKILLed (embedded, real processes)', () => {
  const dirs: string[] = [];
  let service: ServiceProcess | undefined;
  afterAll(async () => {
    service?.child.kill('SIGKILL');
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('every unanswered funding retried with its key after the restart: exactly one ledger funding per key', {
    timeout: 240_000,
  }, async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'botpay-fund-crash-'));
    dirs.push(dataDir);
    const env = { DATA_DIR: dataDir, SECRET_KEY: TEST_SECRET_KEY, ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true' };
    const token = await runCli(['owner', 'token', 'create', '--email', 'crash@example.com'], env);
    expect(token.code, token.stderr).toBe(0);
    const auth = { authorization: `Bearer ${token.stdout.trim()}`, 'content-type': 'application/json' };

    service = await startServiceProcess(env);
    const registered = await fetch(`${service.url}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        bot_name: 'crash bot',
        owner_email: 'crash@example.com',
        callback_url: 'http://127.0.0.1:9/hook',
      }),
    });
    const bot = (await registered.json()) as { bot_id: string; claim_token: string };
    const claim = await fetch(`${service.url}/api/v1/owner/claims`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ claim_token: bot.claim_token }),
    });
    expect(claim.status).toBe(200);

    const cents = (i: number) => 100 + (i % 37);
    const fund = (url: string, i: number) =>
      fetch(`${url}/api/v1/owner/bots/${bot.bot_id}/wallet/fund`, {
        method: 'POST',
        headers: { ...auth, 'idempotency-key': `funding-${i}` },
        body: JSON.stringify({ amount_cents: cents(i) }),
      });

    // Fundings in parallel streams until the process is killed (after some were answered).
    const answered = new Map<number, string>();
    let next = 0;
    let killed = false;
    const crashed = service;
    const streams = Array.from({ length: STREAMS }, async () => {
      while (!killed && next < FUNDINGS) {
        const i = next++;
        try {
          const res = await fund(crashed.url, i);
          if (res.status === 200) answered.set(i, ((await res.json()) as { funding_id: string }).funding_id);
        } catch {
          // The process went away with this request in flight: unanswered.
        }
        if (!killed && answered.size >= KILL_AFTER_ANSWERS) {
          killed = true;
          crashed.child.kill('SIGKILL');
        }
      }
    });
    await Promise.all(streams);
    expect(await crashed.exited).toBe('SIGKILL');
    const answeredBefore = new Map(answered);
    expect(answeredBefore.size).toBeGreaterThanOrEqual(KILL_AFTER_ANSWERS);
    expect(answeredBefore.size).toBeLessThan(FUNDINGS);

    // Restart on the same data directory and send every funding again with its key: the
    // unanswered ones (in flight at the kill or never sent) and, to check the replay, the rest.
    service = await startServiceProcess(env);
    const restarted = service;
    // Every funding answered before the kill survived it (the answer came after the commit).
    const booked = new Set<string>();
    let before = '';
    for (;;) {
      const page = (await (
        await fetch(
          `${restarted.url}/api/v1/owner/bots/${bot.bot_id}/transactions?limit=200${before ? `&before=${encodeURIComponent(before)}` : ''}`,
          { headers: auth },
        )
      ).json()) as { transactions: Array<{ kind: string; reference: string; created_at: string }> };
      for (const t of page.transactions) if (t.kind === 'funding') booked.add(t.reference);
      if (page.transactions.length < 200) break;
      before = page.transactions.at(-1)!.created_at;
    }
    for (const id of answeredBefore.values()) expect(booked.has(id), id).toBe(true);
    const final = new Map<number, string>();
    let cursor = 0;
    await Promise.all(
      Array.from({ length: STREAMS }, async () => {
        while (cursor < FUNDINGS) {
          const i = cursor++;
          const res = await fund(restarted.url, i);
          expect(res.status, `funding-${i}`).toBe(200);
          final.set(i, ((await res.json()) as { funding_id: string }).funding_id);
        }
      }),
    );
    for (const [i, id] of answeredBefore) expect(final.get(i), `funding-${i} replayed`).toBe(id);
    expect(new Set(final.values()).size).toBe(FUNDINGS);

    // The ledger, read from the data directory once the service has stopped.
    restarted.child.kill('SIGTERM');
    await restarted.exited;
    service = undefined;
    const db = await openDatabase(parseConfig({ DATA_DIR: dataDir, SECRET_KEY: TEST_SECRET_KEY }));
    try {
      const rows = await db.query<{ reference: string; cents: number }>(
        `SELECT t.reference, (sum(e.amount_micros) / 10000.0)::float8 AS cents
             FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id AND e.account = 'wallet_available'
            WHERE t.bot_id = $1 AND t.kind = 'funding' GROUP BY t.id, t.reference`,
        [bot.bot_id],
      );
      // One ledger funding per key, each the one its key's answer names, for the key's amount.
      expect(rows).toHaveLength(FUNDINGS);
      const byReference = new Map(rows.map((r) => [r.reference, r.cents]));
      for (const [i, id] of final) expect(byReference.get(id), `funding-${i}`).toBe(cents(i));
      const [wallet] = await db.query<{ available_micros: number }>(
        'SELECT available_micros FROM wallets WHERE bot_id = $1',
        [bot.bot_id],
      );
      const total = Array.from({ length: FUNDINGS }, (_, i) => cents(i)).reduce((a, b) => a + b, 0);
      expect(Number(wallet!.available_micros)).toBe(total * 10_000);
    } finally {
      await db.close();
    }
  });
});
