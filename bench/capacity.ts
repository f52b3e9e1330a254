import pg from 'pg';
import { BENCH_DATABASE_URL, type Child, DURATION_SECONDS, saveResults, startChild } from './lib.ts';
import {
  type CheckoutBot,
  checkoutLoad,
  openOwnerGuardrails,
  seedCheckoutBot,
  startBenchService,
} from './seed.ts';

// npm run bench:capacity — sizing figures for docs/deploy.md ("How many instances and connections").
//
// On one PostgreSQL schema, real `botpay serve` processes (ROLES=api) answer approved checkouts from
// 64 bots with cards at 32 client connections: first one instance, then two sharing the same load.
// While the load runs, pg_stat_activity is sampled every 20 ms for the service's connections
// (application_name botpay-capacity): how many are open and how many are busy (active or idle in
// transaction). Busy connections ÷ checkouts per second is what an instance's pool must cover per
// unit of load (Little's law), whatever the machine's speed.
//
// On this 2-core machine the two instances, PostgreSQL and the load generator share the same cores,
// so the two-instance row shows the machine's limit, not the service's: instances scale out only
// onto cores of their own. The ratio is printed so that this is visible rather than assumed.

const CONNECTIONS = 32;
const OWNERS = 16;
const BOTS_PER_OWNER = 4;
const APP_NAME = 'botpay-capacity';

/** Owners with bots that each have a funded wallet and an auto-approving card (made-up number). */
async function seedCheckoutBots(base: string, ownerToken: string): Promise<CheckoutBot[]> {
  const ownerAuth = { authorization: `Bearer ${ownerToken}` };
  await openOwnerGuardrails(base, ownerAuth);
  const bots: CheckoutBot[] = [];
  for (let i = 0; i < OWNERS * BOTS_PER_OWNER; i++) {
    bots.push(
      await seedCheckoutBot(base, ownerAuth, {
        name: `capacity-${i}`,
        ownerEmail: 'bench@example.com',
        approvalMode: 'auto_approve_under_threshold',
      }),
    );
  }
  return bots;
}

interface Phase {
  instances: number;
  checkoutsPerSecond: number;
  p50: number;
  p99: number;
  busyMean: number;
  busyPeak: number;
  openPeak: number;
}

/** Samples the service's connections in pg_stat_activity until stopped. */
function sampleConnections(admin: pg.Client) {
  const busy: number[] = [];
  const open: number[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const r = await admin.query(
        `SELECT count(*) FILTER (WHERE state IN ('active', 'idle in transaction'))::int AS busy,
                count(*)::int AS open
           FROM pg_stat_activity WHERE application_name = $1`,
        [APP_NAME],
      );
      busy.push(r.rows[0].busy);
      open.push(r.rows[0].open);
      await new Promise((res) => setTimeout(res, 20));
    }
  })();
  return async () => {
    running = false;
    await loop;
    const mean = busy.reduce((a, b) => a + b, 0) / Math.max(1, busy.length);
    return { busyMean: mean, busyPeak: Math.max(0, ...busy), openPeak: Math.max(0, ...open) };
  };
}

async function phase(
  admin: pg.Client,
  schema: string,
  instances: Child[],
  bots: CheckoutBot[],
  rate?: number,
): Promise<Phase> {
  // The bench runs far above the real hourly checkout limit (raised for it); each phase starts with
  // the limiter's window empty, as it is for a bot under the limit.
  const hits = await admin.query(`SELECT to_regclass($1) AS t`, [`${schema}.rate_limit_hits`]);
  if (hits.rows[0].t) await admin.query(`DELETE FROM ${schema}.rate_limit_hits`);
  const per = Math.floor(CONNECTIONS / instances.length);
  await Promise.all(instances.map((c) => checkoutLoad(c.url, per, bots, 2))); // warm-up, not counted
  const stop = sampleConnections(admin);
  const results = await Promise.all(
    instances.map((c) => checkoutLoad(c.url, per, bots, DURATION_SECONDS, rate && rate / instances.length)),
  );
  const conns = await stop();
  const ok = results.reduce((a, r) => a + r['2xx'], 0) / DURATION_SECONDS;
  const non2xx = results.reduce((a, r) => a + r.non2xx + r.errors + r.timeouts, 0);
  if (non2xx > 0) console.warn(`${non2xx} checkouts were not approved (non-2xx or errors)`);
  const p = {
    instances: instances.length,
    checkoutsPerSecond: ok,
    p50: Math.max(...results.map((r) => r.latency.p50)),
    p99: Math.max(...results.map((r) => r.latency.p99)),
    ...conns,
  };
  console.log(
    `${p.instances} instance(s)${rate ? ` at ${rate.toFixed(0)}/s offered` : ''}: ${ok.toFixed(0)} approved checkouts/s, p50 ${p.p50} ms, p99 ${p.p99} ms; ` +
      `service connections busy ${p.busyMean.toFixed(1)} on average (peak ${p.busyPeak}), open at most ${p.openPeak}`,
  );
  return p;
}

const svc = await startBenchService('postgres', { ROLES: 'api', PGAPPNAME: APP_NAME });
const second = await startChild(undefined, { ...svc.env, ROLES: 'api', PGAPPNAME: APP_NAME }, '/readyz');
const admin = new pg.Client({ connectionString: BENCH_DATABASE_URL });
await admin.connect();
try {
  const schema = new URL(svc.env.DATABASE_URL!).searchParams.get('options')!.split('=')[1]!;
  console.log(`seeding ${OWNERS * BOTS_PER_OWNER} bots with cards…`);
  const bots = await seedCheckoutBots(svc.child.url, svc.ownerToken);
  const one = await phase(admin, schema, [svc.child], bots);
  // Half the rate one instance can take: the connections a steady load needs, without the queueing
  // of a saturated machine.
  const half = await phase(admin, schema, [svc.child], bots, Math.max(1, one.checkoutsPerSecond / 2));
  const two = await phase(admin, schema, [svc.child, second], bots);
  const busyPer100 = (p: Phase) => (p.busyMean / Math.max(1, p.checkoutsPerSecond)) * 100;
  await saveResults('capacity', [
    {
      benchmark: 'capacity',
      database: 'postgres',
      metric: `approved checkouts/s, two instances ÷ one (${CONNECTIONS} client conn, same 2-core machine)`,
      value: two.checkoutsPerSecond,
      baseline: 'one instance',
      baselineValue: one.checkoutsPerSecond,
      ratio: two.checkoutsPerSecond / Math.max(1, one.checkoutsPerSecond),
      goal: '-',
    },
    {
      benchmark: 'capacity',
      database: 'postgres',
      metric: 'busy database connections per 100 checkouts/s (one instance at half its maximum rate, mean)',
      value: busyPer100(half),
      baseline: 'pool size per instance',
      baselineValue: 20,
      ratio: busyPer100(half) / 20,
      goal: '-',
    },
    {
      benchmark: 'capacity',
      database: 'postgres',
      metric: 'peak busy database connections of one instance at full load',
      value: one.busyPeak,
      baseline: 'pool size per instance',
      baselineValue: 20,
      ratio: one.busyPeak / 20,
      goal: '-',
    },
    {
      benchmark: 'capacity',
      database: 'postgres',
      metric: 'checkout p50 ms at half the maximum rate',
      value: half.p50,
      baseline: 'p50 ms at full load',
      baselineValue: one.p50,
      ratio: half.p50 / Math.max(1, one.p50),
      goal: '-',
    },
  ]);
} finally {
  await admin.end();
  await second.stop();
  await svc.stop();
}
