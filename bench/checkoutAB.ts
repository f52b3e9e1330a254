import { readFileSync } from 'node:fs';
import pg from 'pg';
import { createOwnerToken, findOrCreateOwner } from '../src/owners/auth.ts';
import { migrate } from '../src/platform/db/migrate.ts';
import { openPostgres } from '../src/platform/db/postgres.ts';
import { randomBase32 } from '../src/platform/ids.ts';
import { BENCH_DATABASE_URL, type Child, clearRateLimits, cpuMsOf, median, startChild } from './lib.ts';
import {
  BENCH_SECRET_KEY,
  type CheckoutBot,
  checkoutLoad,
  openOwnerGuardrails,
  seedCheckoutBot,
} from './seed.ts';

// npm run bench:checkout-ab (PostgreSQL: BENCH_DATABASE_URL or TEST_DATABASE_URL)
//
// Two services side by side, each on a schema of its own, with the checkout load of
// bench/checkout.ts (32 connections, approved purchases) on one and then the other, round after
// round, the first side alternating: a change that shows only under concurrency (a table's
// fillfactor, an index, a lock held longer or shorter, a function body) measured against the
// current schema in the same minutes, which single runs of bench:checkout on a shared machine
// cannot resolve (their minimal transaction moves by a fifth from one run to the next).
//
//   AB_SQL=<file>   SQL run on side B's schema after its migrations, before seeding (for example a
//                   CREATE OR REPLACE FUNCTION spend_run from another body, or ALTER TABLE … SET
//                   (fillfactor = 10)); AB_SQL_A the same for side A (default: none)
//   AB_OWNERS_B, AB_BOTS_B  side B's owners and bots per owner (default 16 × 4, as side A)
//   AB_ENV_A, AB_ENV_B  the service's own settings on each side, as NAME=value pairs separated by
//                   spaces (for example AB_ENV_A='SPEND_BATCH_SIZE=1': side A without group commit)
//   AB_ROUNDS (10), AB_SECONDS (5)
//
// Prints each round's approved checkouts/s and CPU per checkout (the service's process and its
// PostgreSQL backends, from /proc), and the medians of B ÷ A. Between identical sides a round's
// ratio moved between 0.91 and 1.15 on 2026-12-04, and the median of 14 rounds lands within a few
// hundredths of 1: read a change below that as none.

const ROUNDS = Number(process.env.AB_ROUNDS ?? 10);
const SECONDS = Number(process.env.AB_SECONDS ?? 5);
const CONNECTIONS = 32;

interface Side {
  name: 'a' | 'b';
  schema: string;
  app: string;
  child: Child;
  bots: CheckoutBot[];
}

/** NAME=value pairs separated by spaces, as an environment. */
function sideEnv(pairs: string | undefined): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of (pairs ?? '').split(/\s+/).filter(Boolean)) {
    const at = pair.indexOf('=');
    if (at < 1) throw new Error(`AB_ENV_A / AB_ENV_B: not NAME=value: ${pair}`);
    env[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return env;
}

const admin = new pg.Client({ connectionString: BENCH_DATABASE_URL });
await admin.connect();
const sides: Side[] = [];

async function startSide(name: Side['name'], sqlFile: string | undefined, owners: number, perOwner: number) {
  const schema = `bench_ab_${name}_${randomBase32(8)}`;
  await admin.query(`CREATE SCHEMA ${schema}`);
  const db = await openPostgres({ connectionString: BENCH_DATABASE_URL, schema, max: 2 });
  try {
    await migrate(db);
    if (sqlFile) await db.exec(readFileSync(sqlFile, 'utf8'));
    // The service's backends are found by this name (their CPU apart from the other side's).
    const app = `botpay-bench-${schema}`;
    const url = new URL(BENCH_DATABASE_URL);
    url.searchParams.set('application_name', app);
    url.searchParams.set('options', `-c search_path=${schema}`);
    const child = await startChild(
      'bench/baseline/checkoutServer.ts',
      {
        DATABASE_URL: url.toString(),
        SECRET_KEY: BENCH_SECRET_KEY,
        REGISTRATION_RATE_LIMIT_PER_HOUR: '1000000',
        CHECKOUT_RATE_LIMIT_PER_HOUR: '1000000',
        ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
        ROLES: 'api',
        ...sideEnv(process.env[name === 'a' ? 'AB_ENV_A' : 'AB_ENV_B']),
      },
      '/readyz',
    );
    const side: Side = { name, schema, app, child, bots: [] };
    sides.push(side);
    for (let o = 0; o < owners; o++) {
      const email = `bench-${o}@example.com`;
      const token = await db.transaction(async (tx) =>
        createOwnerToken(tx, (await findOrCreateOwner(tx, email, Date.now())).id, Date.now()),
      );
      const ownerAuth = { authorization: `Bearer ${token}` };
      await openOwnerGuardrails(child.url, ownerAuth);
      for (let b = 0; b < perOwner; b++) {
        side.bots.push(
          await seedCheckoutBot(child.url, ownerAuth, {
            name: `bench-${o}-${b}`,
            ownerEmail: email,
            approvalMode: 'auto_approve_under_threshold',
          }),
        );
      }
    }
  } finally {
    await db.close();
  }
}

async function backendsMs(side: Side): Promise<number> {
  const r = await admin.query<{ pid: number }>(
    'SELECT pid FROM pg_stat_activity WHERE application_name = $1',
    [side.app],
  );
  return r.rows.reduce((sum, row) => sum + (cpuMsOf(row.pid) || 0), 0);
}

async function phase(side: Side) {
  // An empty rate-limit window at each phase, as bench/checkout.ts does.
  await clearRateLimits(admin, side.schema);
  const service0 = cpuMsOf(side.child.process.pid);
  const backends0 = await backendsMs(side);
  const result = await checkoutLoad(side.child.url, CONNECTIONS, side.bots, SECONDS);
  const n = Math.max(1, result.requests.total);
  return {
    okPerSecond: result['2xx'] / SECONDS,
    failed: result.non2xx + result.errors + result.timeouts,
    cpuUs: ((cpuMsOf(side.child.process.pid) - service0 + ((await backendsMs(side)) - backends0)) * 1000) / n,
  };
}

try {
  await startSide('a', process.env.AB_SQL_A, 16, 4);
  await startSide(
    'b',
    process.env.AB_SQL,
    Number(process.env.AB_OWNERS_B ?? 16),
    Number(process.env.AB_BOTS_B ?? 4),
  );
  for (const side of sides) await checkoutLoad(side.child.url, CONNECTIONS, side.bots, 3); // JIT, pools, caches
  const throughput: number[] = [];
  const cpu: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? sides : [...sides].reverse();
    const got = new Map<string, Awaited<ReturnType<typeof phase>>>();
    for (const side of order) got.set(side.name, await phase(side));
    const a = got.get('a')!;
    const b = got.get('b')!;
    if (a.failed + b.failed > 0) throw new Error(`round ${round}: ${a.failed} failed on A, ${b.failed} on B`);
    throughput.push(b.okPerSecond / a.okPerSecond);
    cpu.push(b.cpuUs / a.cpuUs);
    console.log(
      `round ${round + 1}: A ${a.okPerSecond.toFixed(0)}/s at ${a.cpuUs.toFixed(0)} µs, ` +
        `B ${b.okPerSecond.toFixed(0)}/s at ${b.cpuUs.toFixed(0)} µs: B ÷ A ${(b.okPerSecond / a.okPerSecond).toFixed(3)}`,
    );
  }
  console.log(
    `B = ${process.env.AB_SQL ?? 'the same schema'}${process.env.AB_ENV_B ? ` with ${process.env.AB_ENV_B}` : ''}${process.env.AB_ENV_A ? `, A with ${process.env.AB_ENV_A}` : ''}: approved checkouts/s B ÷ A ${median(throughput).toFixed(3)}, ` +
      `CPU per checkout (service + its backends) B ÷ A ${median(cpu).toFixed(3)} (medians of ${ROUNDS} rounds)`,
  );
} finally {
  await Promise.all(sides.map((side) => side.child.stop()));
  for (const side of sides) await admin.query(`DROP SCHEMA IF EXISTS ${side.schema} CASCADE`).catch(() => {});
  await admin.end();
}
