import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, isPostgres, POSTGRES_URL, type TestDatabase } from '../support/db.ts';

// The webhook queue (migration 0046) holds exactly the pending deliveries. The worker's recording
// function writes the queue itself and runs with botpay.webhook_queue = 'written', so the trigger
// that follows other writers of a delivery's status (webhook_deliveries_queue_sync) is not called
// for its writes: that call per recorded row is the cost the queue was made to remove. Counted with
// PostgreSQL's function statistics (track_functions, for the transaction), so PostgreSQL only; the
// queue's contents are checked on both databases by the other files of this folder.
describe.skipIf(!isPostgres)('webhook queue and its sync trigger (PostgreSQL)', () => {
  let database: TestDatabase;
  let client: pg.Client;

  beforeAll(async () => {
    database = await createTestDatabase({ poolSize: 2 });
    await database.db.query(
      `INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
                         webhook_secret_enc, callback_url, webhook_status, created_at)
       VALUES ('bot_sync', 'sync', 'sync@example.com', 'sync@example.com', 'helper', md5('k'), 'svc_live_', 'x',
               'http://127.0.0.1:9/hook', 'active', now())`,
    );
    await database.db.query(
      `INSERT INTO events (id, bot_id, type, body, created_at)
       SELECT 'evt_sync' || g, 'bot_sync', 'wallet.funded', '{}', now() - interval '1 minute'
         FROM generate_series(1, 3) g`,
    );
    client = new pg.Client({ connectionString: POSTGRES_URL, options: `-c search_path=${database.schema}` });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
    await database?.drop();
  });

  const syncCalls = async () => {
    const { rows } = await client.query<{ calls: string }>(
      `SELECT calls FROM pg_stat_xact_user_functions WHERE funcname = 'webhook_queue_sync'`,
    );
    return Number(rows[0]?.calls ?? 0);
  };

  it('the recording writes the queue without the trigger; an acknowledgement goes through it', async () => {
    await client.query(`SET track_functions = 'pl'`);
    await client.query('BEGIN');
    try {
      const claimed = await client.query<{ id: string }>(
        `SELECT * FROM webhook_claim(now(), now() + interval '1 minute', 'tok', 8, 10, '{}', 100)`,
      );
      const ids = claimed.rows.map((r) => r.id);
      expect(ids).toHaveLength(3);
      // Two delivered, one failed with a retry to come.
      await client.query(
        `SELECT * FROM webhook_record_and_claim($1, $2, '{t,t,f}', '{200,200,500}', '{ok,ok,no}', '{NULL,NULL,x}',
           '{1,1,1}', '{a,a,a}', now(), '{60}', '{bot_sync}', '{f}', '{1}', 3, 6, now(), '', 8, 0, '{}', 0)`,
        [ids, ids.map(() => 'tok')],
      );
      expect(await syncCalls()).toBe(0);
      const { rows: queued } = await client.query<{
        delivery_id: string;
        attempts: number;
        lock_token: string | null;
        in_step: boolean;
      }>(
        `SELECT q.delivery_id, q.attempts, q.lock_token,
                q.due_at = d.next_attempt_at AND q.due_at = now() + interval '60 seconds'
                AND d.attempts = q.attempts AND d.status = 'pending' AS in_step
           FROM webhook_queue q JOIN webhook_deliveries d ON d.id = q.delivery_id`,
      );
      expect(queued).toEqual([{ delivery_id: ids[2], attempts: 1, lock_token: null, in_step: true }]);
      const { rows: settled } = await client.query<{ status: string }>(
        'SELECT status FROM webhook_deliveries WHERE id = ANY($1) ORDER BY status',
        [ids.slice(0, 2)],
      );
      expect(settled).toEqual([{ status: 'delivered' }, { status: 'delivered' }]);

      // The bot acknowledges the retrying one: it leaves the queue through the trigger.
      await client.query(`UPDATE webhook_deliveries SET status = 'acked' WHERE id = $1`, [ids[2]]);
      expect(await syncCalls()).toBe(1);
      expect((await client.query('SELECT 1 FROM webhook_queue')).rows).toEqual([]);
      // An owner's retry of it queues it again, due now, with its attempts.
      await client.query(
        `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = now() WHERE id = $1`,
        [ids[2]],
      );
      expect(await syncCalls()).toBe(2);
      const { rows: again } = await client.query(
        'SELECT delivery_id, attempts, lock_token, due_at = now() AS due_now FROM webhook_queue',
      );
      expect(again).toEqual([{ delivery_id: ids[2], attempts: 1, lock_token: null, due_now: true }]);
    } finally {
      await client.query('ROLLBACK');
    }
  });
});
