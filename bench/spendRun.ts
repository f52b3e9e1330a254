import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { spendCall } from '../src/spend/run.ts';

// npm run bench:spend-run
//
// PostgreSQL's CPU per spend_run call, this version against another body of the function, from one
// session: the whole-checkout bench (bench/checkout.ts) cannot resolve a few percent on a shared
// machine, this can. Three functions are created beside each other: A (this version's file), A′ (the
// same file again: the noise floor) and B (SPEND_RUN_B, a spend_run.sql of another version; default
// the copy of the 0058 version in test/foundation/fixtures/functions-0058, with the spend_add.sql
// beside it when B calls it). Batches of 50 card
// purchases (approved at once, real profile and decoy in turn, no card named) rotate between the
// three; the backend's CPU comes from /proc/<pid>/schedstat (so PostgreSQL must run on this
// machine). A is called as spendAlone calls it on PostgreSQL (p_announce false); a B without that
// parameter announces with NOTICEs, as its version did.
//
// Prints µs per call and the ratios B ÷ A and A′ ÷ A (total, and median of the batch pairs).
//
// BENCH_IDLE_MS (default 0): the client waits that long after each call, as a service's connection
// waits between requests. Back to back, the backend runs with warm CPU caches; a backend that
// waits (or shares its core with the rest of a busy service) pays more for the same call: 2026-12-04,
// 630–750 µs per call back to back against 940–990 µs with 1 ms between calls (the waits are not
// counted: only the backend's own CPU is). A change that touches less memory (fewer relations,
// indexes or plans) may gain more with waits than without.

const B_FILE = process.env.SPEND_RUN_B ?? 'test/foundation/fixtures/functions-0058/spend_run.sql';
const BATCH = 50;
const BATCHES = Number(process.env.BENCH_BATCHES ?? 40);
const IDLE_MS = Number(process.env.BENCH_IDLE_MS ?? 0);

// The test support reads TEST_DB when it is loaded: PostgreSQL, whatever the shell says.
process.env.TEST_DB = 'postgres';
const { botWithHoldingCard, spendParams } = await import('../test/spend/helpers.ts');
const { connectionFor } = await import('../test/support/db.ts');
const { createTestService } = await import('../test/support/service.ts');
const svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000000' } });
try {
  const bots: Awaited<ReturnType<typeof botWithHoldingCard>>[] = [];
  for (let i = 0; i < 4; i++) bots.push(await botWithHoldingCard(svc));
  const url = new URL(connectionFor(svc.database.schema ?? ''));
  url.searchParams.set('options', `${url.searchParams.get('options')} -c botpay.defer_notify=on`);
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  client.on('notice', () => {});
  const current = readFileSync('src/migrations/functions/spend_run.sql', 'utf8');
  const other = readFileSync(B_FILE, 'utf8');
  const variants = [
    { name: 'a', sql: current, announceParam: true },
    { name: 'a2', sql: current, announceParam: true },
    { name: 'b', sql: other, announceParam: other.includes('p_announce') },
  ];
  // A body of a version before 0061 adds each counter with spend_add, which this schema no longer has.
  if (other.includes('spend_add('))
    await client.query(readFileSync(join(dirname(B_FILE), 'spend_add.sql'), 'utf8'));
  for (const v of variants)
    await client.query(v.sql.replace('FUNCTION spend_run(', `FUNCTION spend_run_${v.name}(`));
  // Room for every purchase below in the profiles' allowances.
  await client.query('UPDATE card_profiles SET allowance_micros = 1000000000000');
  const pid = (await client.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]?.p;
  const cpuNs = () => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);

  let n = 0;
  const call = async (v: (typeof variants)[number]) => {
    const bot = bots[n++ % bots.length]!;
    const profileIndex = n % 2 ? bot.card.real_profile_index : bot.card.decoyIndex;
    const p = spendParams(
      svc,
      bot.botId,
      { kind: 'card', cardId: null, profileIndex },
      10_000,
      `rl:${bot.botId}`,
    );
    p.rateLimit = 1_000_000;
    let sql = `SELECT ${spendCall.sql} AS r`.replace('spend_run(', `spend_run_${v.name}(`);
    let values = spendCall.params({ ...p, lowBalanceMicros: null, announce: false });
    if (!v.announceParam) {
      const at = /, p_announce => \$(\d+)/.exec(sql);
      if (at) {
        sql = sql.replace(at[0], '');
        values = values.filter((_, i) => i !== Number(at[1]) - 1);
      }
    }
    const r = await client.query<{ r: { ok?: boolean } }>({ name: v.name, text: sql, values });
    if (r.rows[0]?.r.ok !== true) throw new Error(`spend_run_${v.name}: ${JSON.stringify(r.rows[0]?.r)}`);
  };
  // Warm-up: plans cached, counter rows created.
  for (let i = 0; i < 100; i++) for (const v of variants) await call(v);

  const total = new Map(variants.map((v) => [v.name, 0]));
  const ratios = { b: [] as number[], a2: [] as number[] };
  for (let b = 0; b < BATCHES; b++) {
    const spent = new Map<string, number>();
    // Each batch round starts with another variant: none always runs first.
    for (let k = 0; k < variants.length; k++) {
      const v = variants[(b + k) % variants.length]!;
      const start = cpuNs();
      for (let i = 0; i < BATCH; i++) {
        await call(v);
        if (IDLE_MS > 0) await new Promise((r) => setTimeout(r, IDLE_MS));
      }
      spent.set(v.name, cpuNs() - start);
      total.set(v.name, (total.get(v.name) ?? 0) + (cpuNs() - start));
    }
    ratios.b.push((spent.get('b') ?? 0) / (spent.get('a') ?? 1));
    ratios.a2.push((spent.get('a2') ?? 0) / (spent.get('a') ?? 1));
  }
  await client.end();
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1] ?? Number.NaN;
  const perCall = (name: string) => ((total.get(name) ?? 0) / 1000 / (BATCH * BATCHES)).toFixed(0);
  const ratio = (name: string) => ((total.get(name) ?? 0) / (total.get('a') ?? 1)).toFixed(3);
  console.log(
    `spend_run, PostgreSQL CPU per call (${BATCH * BATCHES} calls each${IDLE_MS > 0 ? `, ${IDLE_MS} ms apart` : ''}, B = ${B_FILE}):`,
  );
  console.log(
    `  A (this version) ${perCall('a')} µs, A′ (the same again) ${perCall('a2')} µs, B ${perCall('b')} µs`,
  );
  console.log(
    `  B ÷ A ${ratio('b')} (median of batch pairs ${median(ratios.b).toFixed(3)}); ` +
      `A′ ÷ A ${ratio('a2')} (median ${median(ratios.a2).toFixed(3)}): the noise floor`,
  );
} finally {
  await svc.close();
}
