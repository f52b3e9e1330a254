import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, isPostgres, POSTGRES_URL, type TestDatabase } from '../support/db.ts';
import { nestedPlans } from '../support/plans.ts';

// The double-entry check (ledger_check_balanced, src/migrations/functions/) sums a ledger
// transaction's entries at commit, once per entry. Its plan is cached per connection: one made
// while the statistics described a small ledger_entries kept reading the whole table for every
// entry as the table grew, until the next analyse (in the checkout bench, a table grown from a few
// hundred entries to five thousand within seconds cost about 0.6 ms of PostgreSQL's CPU per
// checkout). This plays a young database: analysed while small, the check run often enough on one
// connection for its plan to be cached, then the table grown twenty-fold; the check must still
// read the transaction's entries through their index (auto_explain shows the plan used inside the
// trigger).
describe.skipIf(!isPostgres)(
  'the ledger balance check reads by index whatever the statistics (PostgreSQL)',
  () => {
    let database: TestDatabase;
    let client: pg.Client;
    let seq = 0;

    /** One balanced ledger transaction (two entries) on `c`, committed: the check runs at COMMIT. */
    async function balancedPair(c: pg.Client): Promise<void> {
      const id = `ltx_plan${seq++}`;
      await c.query('BEGIN');
      await c.query(
        `INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at)
       VALUES ($1, 'bot_plan', 'funding', $1, 'plan', now())`,
        [id],
      );
      await c.query(
        `INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_micros, created_at)
       VALUES ($1, 'bot_plan', 'owner_funding', -100, now()), ($1, 'bot_plan', 'wallet_available', 100, now())`,
        [id],
      );
      await c.query('COMMIT');
    }

    beforeAll(async () => {
      database = await createTestDatabase({ poolSize: 2 });
      const db = database.db;
      await db.query(
        `INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
                         webhook_secret_enc, webhook_status, created_at)
       VALUES ('bot_plan', 'plan', 'plan@example.com', 'plan@example.com', 'helper', md5('k'), 'svc_live_', 'x',
               'active', now())`,
      );
      await db.query("INSERT INTO wallets (bot_id, status, updated_at) VALUES ('bot_plan', 'active', now())");
      client = new pg.Client({
        connectionString: POSTGRES_URL,
        options: `-c search_path=${database.schema}`,
      });
      await client.connect();
      // A small ledger, analysed; then the check runs often enough on this connection for its plan
      // to be cached (PostgreSQL plans the first five runs anew, then may keep one plan).
      for (let i = 0; i < 20; i++) await balancedPair(client);
      await client.query('ANALYZE ledger_entries');
      for (let i = 0; i < 10; i++) await balancedPair(client);
      // The table grows twenty-fold with no analyse since (another connection; triggers off for the
      // bulk load, each pair balances).
      await db.transaction(async (tx) => {
        await tx.query('SET LOCAL session_replication_role = replica');
        await tx.query(
          `INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at)
         SELECT 'ltx_bulk' || g, 'bot_plan', 'funding', 'bulk' || g, 'bulk', now() FROM generate_series(1, 600) g`,
        );
        await tx.query(
          `INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_micros, created_at)
         SELECT 'ltx_bulk' || g, 'bot_plan', a.account, a.amount, now()
           FROM generate_series(1, 600) g,
                (VALUES ('owner_funding', -100), ('wallet_available', 100)) AS a(account, amount)`,
        );
      });
    });
    afterAll(async () => {
      await client?.end();
      await database?.drop();
    });

    it('uses ledger_entries_transaction_idx, not a scan of the whole table', async () => {
      const plans = await nestedPlans(client, () => balancedPair(client));
      const plan = plans.find((n) => n.includes('FROM ledger_entries WHERE transaction_id'));
      expect(plan, 'auto_explain logged the balance check').toBeDefined();
      expect(plan).toMatch(/ledger_entries_transaction_idx/);
      expect(plan).not.toMatch(/Seq Scan on ledger_entries/);
    });
  },
);
