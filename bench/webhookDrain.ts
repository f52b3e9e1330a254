import { readFileSync } from 'node:fs';
import pg from 'pg';
import { migrate } from '../src/platform/db/migrate.ts';
import { openPostgres } from '../src/platform/db/postgres.ts';

// The database's part of webhook delivery alone (issue 34): N deliveries drained through the worker's
// two calls (webhook_record_and_claim recording every claimed row as delivered and claiming the next
// 256, as the worker does), with no HTTP and no worker process, on one connection. Prints that
// backend's CPU time per delivery (from /proc, so on the machine running PostgreSQL; 10 ms
// resolution) and the wall time, which the shared machine's other processes do not inflate the way
// they do the whole pipeline's figures in bench/webhooks.ts.
//
//   node bin/run-ts.mjs bench/webhookDrain.ts      (TEST_DATABASE_URL; N=20000; ROOM=256 rows per
//                                                   call; PERF=1 waits 3 s after printing the
//                                                   backend's pid, for perf)
const URL_ =
  process.env.BENCH_DATABASE_URL ??
  process.env.TEST_DATABASE_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
const N = Number(process.env.N ?? 20000);
const ROOM = Number(process.env.ROOM ?? 256);
const schema = `drain_${Math.random().toString(36).slice(2, 10)}`;
const admin = new pg.Client({ connectionString: URL_ });
await admin.connect();
await admin.query(`CREATE SCHEMA ${schema}`);
const db = await openPostgres({ connectionString: URL_, schema, max: 2 });
try {
  await migrate(db);
  await db.close();
  const c = new pg.Client({ connectionString: URL_, options: `-c search_path=${schema}` });
  await c.connect();
  await c.query(`INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
                         webhook_secret_enc, callback_url, webhook_status, created_at)
       SELECT 'bot_d' || g, 'd-' || g, 'd@example.com', 'd@example.com', 'helper', md5('k' || g),
              'svc_live_', 'x', 'http://127.0.0.1:9/hook', 'active', now()
         FROM generate_series(1, 50) g`);
  const ins = async (n: number, off: number) =>
    c.query(
      `INSERT INTO events (id, bot_id, type, body, created_at)
       SELECT 'evt_d' || lpad((g + $2)::text, 10, '0'), 'bot_d' || (g % 50 + 1), 'purchase.approved', repeat('x', 200),
              now() - interval '1 minute' + g * interval '1 microsecond'
         FROM generate_series(1, $1) g`,
      [n, off],
    );
  await ins(2000, 0);
  await c.query('ANALYZE');
  const pid = (await c.query('SELECT pg_backend_pid() AS p')).rows[0].p;
  const cpu = () => {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(f[11]) + Number(f[12])) * 10; // ms (100 Hz)
  };
  const drain = async () => {
    let held: { id: string; token: string }[] = [];
    let n = 0;
    let k = 0;
    for (;;) {
      const token = `t${k++}`;
      const now = new Date();
      const until = new Date(now.getTime() + 60_000);
      const ids = held.map((h) => h.id);
      const r = await c.query(
        `SELECT * FROM webhook_record_and_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, '{60,300}', $10, $11, $12, 3, 6, $13, $14, 8, ${ROOM}, '{}', ${ROOM * 4})`,
        [
          ids,
          held.map((h) => h.token),
          ids.map(() => true),
          ids.map(() => 200),
          ids.map(() => 'ok'),
          ids.map(() => null),
          ids.map(() => 1),
          ids.map(() => 'callback'),
          now,
          [],
          [],
          [],
          until,
          token,
        ],
      );
      n += held.length;
      held = r.rows.map((x) => ({ id: x.id, token }));
      if (held.length === 0) return n;
    }
  };
  await drain(); // warm-up
  await ins(N, 10_000_000);
  const c0 = cpu();
  const t0 = performance.now();
  const n = await drain();
  const ms = performance.now() - t0;
  const used = cpu() - c0;
  const st = await c.query(
    `SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname IN ('webhook_deliveries','events','webhook_queue') ORDER BY 1`,
  );
  console.log(
    JSON.stringify({
      n,
      backendCpuUsPerDelivery: Math.round((used * 1000) / n),
      wallUsPerDelivery: Math.round((ms * 1000) / n),
      stats: st.rows,
    }),
  );
  await c.end();
} finally {
  await admin.query(`DROP SCHEMA ${schema} CASCADE`);
  await admin.end();
}
