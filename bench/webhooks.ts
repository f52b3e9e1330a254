import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { Agent, request } from 'undici';
import { emitEvent } from '../src/events/outbox.ts';
import { createSecretBox, randomHex, sha256Hex } from '../src/platform/crypto.ts';
import { migrate } from '../src/platform/db/migrate.ts';
import type { Queryable } from '../src/platform/db/port.ts';
import { openPostgres } from '../src/platform/db/postgres.ts';
import { newId, randomBase32 } from '../src/platform/ids.ts';
import {
  CORES,
  coresBusyPercent,
  cpuBudgetRow,
  cpuBudgetUs,
  cpuMsOf,
  cpuMsOfAll,
  median,
  POSTGRES_PROCESS,
  percentileOf,
  saveResults,
  stopWithBench,
} from './lib.ts';

// Webhook delivery benchmark on PostgreSQL (issue 4).
//
//   npm run bench:webhooks            (BENCH_DATABASE_URL or TEST_DATABASE_URL, default local test db)
//   BENCH_PROFILE_DIR=/tmp/prof …      also writes a CPU profile of the worker process
//
// Three processes: this one (producer of events and the bare-undici baseline), a loopback receiver
// (child) that records when each event arrives, and `botpay serve` with ROLES=worker (child), so
// neither the receiver nor the producer shares an event loop with the worker.
//   1. baseline: a bare undici POST loop (same body size, CONCURRENCY in flight) to the receiver.
//   2. throughput: the worker starts and delivers WARMUP events (not measured); then, in each of
//      BENCH_ROUNDS rounds (5), a run of the bare loop and a drain: BACKLOG events committed in one
//      transaction, deliveries/s measured at the receiver from the first to the last arrival of
//      theirs. The medians of both are reported.
//   3. latency: events committed at RATE per second for SECONDS seconds (several producers, up to
//      BENCH_EVENTS_PER_TX events per transaction); commit-to-receipt p50/p99 (commit = when COMMIT
//      returned).

const DATABASE_URL =
  process.env.BENCH_DATABASE_URL ??
  process.env.TEST_DATABASE_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
const BOTS = Number(process.env.BENCH_BOTS ?? 50);
// 20,000 (5,000 until 2026-11-25, when the worker started cold on the backlog itself; it warms up
// on WARMUP events first since 2026-11-27).
const BACKLOG = Number(process.env.BENCH_BACKLOG ?? 20_000);
// Delivered before the backlog, not measured: the worker warms up on them.
const WARMUP = Number(process.env.BENCH_WARMUP_EVENTS ?? 2_000);
const RATE = Number(process.env.BENCH_RATE ?? 1000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64);
const PER_TX = Number(process.env.BENCH_EVENTS_PER_TX ?? 4);
/** Rounds of (bare loop, drain), alternated; medians reported. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const SECRET_KEY = 'bench-secret-key-0123456789abcdef0123456789abcdef';

const nowMs = () => performance.timeOrigin + performance.now();

if (process.argv.includes('--receiver')) {
  // Child: answers 200 at once and remembers (event id → arrival time).
  const arrivals = new Map<string, number>();
  let count = 0;
  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/kept') {
      // Polled while a phase runs: one number, not the whole list (serialising every arrival at
      // each poll took receiver CPU that the deliveries were then charged with).
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(String(arrivals.size));
      return;
    }
    if (req.method === 'GET') {
      const body = JSON.stringify({ count, arrivals: Object.fromEntries(arrivals) });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
      return;
    }
    const id = req.headers['x-service-event-id'];
    req.resume();
    req.on('end', () => {
      count++;
      // The baseline's requests carry ids too, but only deliveries are kept (the stats answer lists them).
      if (typeof id === 'string' && !id.startsWith('evt_base') && !arrivals.has(id))
        arrivals.set(id, nowMs());
      res.writeHead(200);
      res.end('ok');
    });
  });
  server.keepAliveTimeout = 30_000;
  server.listen(0, '127.0.0.1', () => {
    process.stdout.write(`PORT ${(server.address() as AddressInfo).port}\n`);
  });
} else {
  await main();
}

function startReceiver(): Promise<{ child: ChildProcess; port: number }> {
  const child = stopWithBench(
    spawn(process.execPath, ['bin/run-ts.mjs', 'bench/webhooks.ts', '--receiver'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += String(d);
      const m = /PORT (\d+)/.exec(out);
      if (m) resolve({ child, port: Number(m[1]) });
    });
    child.once('exit', (code) => reject(new Error(`receiver exited ${code}`)));
  });
}

async function startWorker(schemaUrl: string): Promise<{ child: ChildProcess; port: number }> {
  const { BASE_URL: _vite, ...env } = process.env;
  const port = 20000 + Math.floor(Math.random() * 20000);
  const profile = process.env.BENCH_PROFILE_DIR
    ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`]
    : [];
  const child = stopWithBench(
    spawn(process.execPath, [...profile, 'bin/botpay.mjs', 'serve'], {
      env: {
        ...env,
        DATABASE_URL: schemaUrl,
        SECRET_KEY,
        PORT: String(port),
        HOST: '127.0.0.1',
        ROLES: 'worker',
        LOG_LEVEL: 'warn',
        ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
      },
      stdio: ['ignore', 'inherit', 'inherit'],
    }),
  );
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error('worker exited');
    if (Date.now() > deadline) throw new Error('worker did not start');
    try {
      if ((await fetch(`http://127.0.0.1:${port}/readyz`)).ok) return { child, port };
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

/** The worker's counters: database round trips by kind and attempts made (from /metrics). */
async function workerCounters(port: number): Promise<{ claim: number; record: number; attempts: number }> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const sum = (re: RegExp) => [...text.matchAll(re)].reduce((total, m) => total + Number(m[1]), 0);
  return {
    claim: sum(/^botpay_webhook_worker_round_trips_total\{kind="claim"\} (\S+)$/gm),
    record: sum(/^botpay_webhook_worker_round_trips_total\{kind="record"\} (\S+)$/gm),
    attempts: sum(/^botpay_webhook_delivery_attempts_total\{[^}]*\} (\S+)$/gm),
  };
}

/** Row writes of the schema's tables (pg_stat_user_tables), for writes per delivery. */
async function tableWrites(
  schema: string,
): Promise<Record<string, { ins: number; upd: number; hot: number; del: number }>> {
  const c = new pg.Client({ connectionString: DATABASE_URL });
  await c.connect();
  try {
    // Statistics reach the shared counters when a backend goes idle (at most about a second later).
    await new Promise((r) => setTimeout(r, 1500));
    const { rows } = await c.query(
      `SELECT relname, n_tup_ins::int AS ins, n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot, n_tup_del::int AS del
         FROM pg_stat_user_tables WHERE schemaname = $1 AND (n_tup_ins + n_tup_upd + n_tup_del) > 0`,
      [schema],
    );
    return Object.fromEntries(
      rows.map((r) => [r.relname, { ins: r.ins, upd: r.upd, hot: r.hot, del: r.del }]),
    );
  } finally {
    await c.end();
  }
}

async function receiverStats(port: number): Promise<{ count: number; arrivals: Record<string, number> }> {
  const res = await request(`http://127.0.0.1:${port}/stats`);
  return (await res.body.json()) as { count: number; arrivals: Record<string, number> };
}

/** The number of distinct deliveries the receiver has kept so far. */
async function receiverKept(port: number): Promise<number> {
  const res = await request(`http://127.0.0.1:${port}/kept`);
  return Number(await res.body.text());
}

/**
 * Waits until every id has arrived: polls the receiver's count until it has grown by ids.length
 * since `keptBefore` (cheap), then reads the arrivals once to check them.
 */
async function waitForArrivals(port: number, ids: string[], keptBefore: number, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if ((await receiverKept(port)) >= keptBefore + ids.length) {
      const stats = await receiverStats(port);
      const missing = ids.filter((id) => stats.arrivals[id] === undefined).length;
      if (missing === 0) return stats;
    }
    if (Date.now() > deadline) throw new Error(`events of this phase not all delivered in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main(): Promise<void> {
  const schema = `bench_wh_${randomBase32(8)}`;
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.end();
  const url = new URL(DATABASE_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const db = await openPostgres({ connectionString: DATABASE_URL, schema, max: 48 });
  const receiver = await startReceiver();
  let worker: { child: ChildProcess; port: number } | undefined;
  try {
    await migrate(db);
    const box = createSecretBox(SECRET_KEY);
    const bots: string[] = [];
    for (let i = 0; i < BOTS; i++) {
      const id = newId('bot');
      bots.push(id);
      await db.query(
        `INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix,
                           webhook_secret_enc, callback_url, webhook_status, created_at)
         VALUES ($1, $2, 'bench@example.com', 'bench@example.com', 'helper', $3, 'svc_live_', $4, $5, 'active', now())`,
        [
          id,
          `bench-${i}`,
          sha256Hex(randomHex(24)),
          box.encrypt(`whsec_${randomHex(24)}`),
          `http://127.0.0.1:${receiver.port}/hook`,
        ],
      );
    }
    const data = {
      checkout_id: 'chk_benchbenchbench',
      amount: 12.5,
      vendor: 'bench',
      description: 'x'.repeat(60),
    };

    // 1. Baseline: bare undici POST loop.
    const body = JSON.stringify({
      id: 'evt_x',
      event: 'purchase.approved',
      timestamp: new Date().toISOString(),
      bot_id: bots[0],
      data,
    });
    const agent = new Agent({ keepAliveTimeout: 30_000 });
    // The header fields a delivery carries, with values of the same length (a unique event id per
    // request, as the receiver keys arrivals by it), so that the receiver does the same work per
    // request in both phases. Unsigned: signing is part of the worker's cost being measured.
    let baselineSeq = 0;
    const baselineHeaders = () => {
      const id = `evt_base${String(baselineSeq++).padStart(18, '0')}`;
      return {
        'content-type': 'application/json',
        'user-agent': 'botpay-webhooks/1',
        'x-service-event': 'purchase.approved',
        'x-service-event-id': id,
        'x-service-delivery-id': `dlv_base${id.slice(8)}`,
        'x-service-signature': `sha256=${'0'.repeat(64)}`,
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(Date.now() / 1000)),
        'webhook-signature': `v1,${'A'.repeat(43)}=`,
      };
    };
    const post = async () => {
      const res = await request(`http://127.0.0.1:${receiver.port}/hook`, {
        method: 'POST',
        body,
        headers: baselineHeaders(),
        dispatcher: agent,
      });
      await res.body.text();
    };
    /** One run of the bare loop: requests/s, and CPU ms per request of this process and the receiver. */
    const runBaseline = async (n: number) => {
      let next = 0;
      const t0 = nowMs();
      const cpu0 = process.cpuUsage();
      const receiverCpu0 = cpuMsOf(receiver.child.pid);
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next++ < n) await post();
        }),
      );
      const cpu = process.cpuUsage(cpu0);
      return {
        rate: n / ((nowMs() - t0) / 1000),
        cpu: (cpu.user + cpu.system) / 1000 / n,
        receiverCpu: (cpuMsOf(receiver.child.pid) - receiverCpu0) / n,
      };
    };
    await runBaseline(2000); // warm-up

    // 2. Throughput from a backlog, drained by a warm worker: WARMUP events first (its JIT, its
    // connections and the generic plans each connection makes at its first call, which a running
    // service has long had), then, in each of ROUNDS rounds, a run of the bare loop followed by
    // BACKLOG events committed in one transaction while the worker waits, measured from their
    // first arrival to their last. Rounds alternate the two, and the medians are reported: on a
    // shared machine one run of either moves by a third between runs, and a neighbour's load
    // comes and goes.
    const emitMany = async (tx: Queryable, n: number, ids: string[]) => {
      for (let j = 0; j < n; j++) {
        const e = await emitEvent(tx, {
          botId: bots[j % BOTS]!,
          type: 'purchase.approved',
          data,
          at: Date.now(),
        });
        ids.push(e.id);
      }
    };
    const warm: string[] = [];
    const keptBeforeWarm = await receiverKept(receiver.port);
    await db.transaction((tx) => emitMany(tx, WARMUP, warm));
    // Statistics, as autovacuum keeps them in a running database: the worker's functions get their
    // generic plans from them (a fresh schema without any planned differently; see
    // test/webhooks/claimPlan.test.ts).
    await db.query('ANALYZE');
    worker = await startWorker(url.toString());
    await waitForArrivals(receiver.port, warm, keptBeforeWarm, 120_000);
    const workerPid = worker.child.pid;
    /** One drain of BACKLOG events: deliveries/s, and CPU ms per delivery of the worker, the receiver and PostgreSQL. */
    const drain = async () => {
      const keptBeforeBacklog = await receiverKept(receiver.port);
      const backlog: string[] = [];
      let workerCpu0 = 0;
      let receiverCpu0 = 0;
      let postgresCpu0 = 0;
      await db.transaction(async (tx) => {
        await emitMany(tx, BACKLOG, backlog);
        // From here on, the CPU is the worker's (the commit follows).
        workerCpu0 = cpuMsOf(workerPid);
        receiverCpu0 = cpuMsOf(receiver.child.pid);
        postgresCpu0 = cpuMsOfAll(POSTGRES_PROCESS);
      });
      const stats = await waitForArrivals(receiver.port, backlog, keptBeforeBacklog, 120_000);
      const times = backlog.map((id) => stats.arrivals[id]!).sort((a, b) => a - b);
      return {
        rate: (times.length - 1) / ((times.at(-1)! - times[0]!) / 1000),
        workerCpu: (cpuMsOf(workerPid) - workerCpu0) / BACKLOG,
        receiverCpu: (cpuMsOf(receiver.child.pid) - receiverCpu0) / BACKLOG,
        // Every PostgreSQL process: the worker's claims and records (and whatever else uses it meanwhile).
        postgresCpu: (cpuMsOfAll(POSTGRES_PROCESS) - postgresCpu0) / BACKLOG,
      };
    };
    const bareRuns: Awaited<ReturnType<typeof runBaseline>>[] = [];
    const drains: Awaited<ReturnType<typeof drain>>[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      bareRuns.push(await runBaseline(BACKLOG));
      drains.push(await drain());
    }
    await agent.close();
    const baselineRate = median(bareRuns.map((r) => r.rate));
    const baselineCpuPerRequest = median(bareRuns.map((r) => r.cpu));
    const baselineReceiverCpuPerRequest = median(bareRuns.map((r) => r.receiverCpu));
    const deliveryRate = median(drains.map((d) => d.rate));
    const workerCpuPerDelivery = median(drains.map((d) => d.workerCpu));
    const receiverCpuPerDelivery = median(drains.map((d) => d.receiverCpu));
    const postgresCpuPerDelivery = median(drains.map((d) => d.postgresCpu));
    const list = (xs: number[]) => xs.map((x) => Math.round(x)).join(', ');
    console.log(
      `baseline: bare undici POST loop, ${CONCURRENCY} in flight: ${Math.round(baselineRate)} req/s ` +
        `(median of ${list(bareRuns.map((r) => r.rate))})`,
    );
    console.log(
      `drains of ${BACKLOG} events: ${Math.round(deliveryRate)} deliveries/s (median of ${list(drains.map((d) => d.rate))}); ` +
        `ratio per round ${drains.map((d, i) => (d.rate / bareRuns[i]!.rate).toFixed(2)).join(', ')}`,
    );
    console.log(
      `CPU per delivery: worker process ${(workerCpuPerDelivery * 1000).toFixed(0)} µs, ` +
        `receiver ${(receiverCpuPerDelivery * 1000).toFixed(0)} µs, ` +
        `PostgreSQL ${(postgresCpuPerDelivery * 1000).toFixed(0)} µs; ` +
        `bare undici loop ${(baselineCpuPerRequest * 1000).toFixed(0)} µs per request ` +
        `(receiver ${(baselineReceiverCpuPerRequest * 1000).toFixed(0)} µs)`,
    );
    // Every process that works on a delivery, summed: at the drain's rate, how much of the machine
    // they used (below 100 %: the pipeline waits, not only the CPU), and what the goal would leave.
    const deliveryCpuUs = (workerCpuPerDelivery + receiverCpuPerDelivery + postgresCpuPerDelivery) * 1000;
    const baselineCpuUs = (baselineCpuPerRequest + baselineReceiverCpuPerRequest) * 1000;
    console.log(
      `CPU per delivery, worker + receiver + PostgreSQL: ${deliveryCpuUs.toFixed(0)} µs (bare loop + receiver: ` +
        `${baselineCpuUs.toFixed(0)} µs per request); in use during the drain: ` +
        `${coresBusyPercent(deliveryRate, deliveryCpuUs).toFixed(0)} % of ${CORES} cores; ` +
        `0.5 × the bare loop's rate leaves ${cpuBudgetUs(0.5 * baselineRate).toFixed(0)} µs per delivery`,
    );
    const counters = await workerCounters(worker.port);
    const tripsPerDelivery = (counters.claim + counters.record) / Math.max(1, counters.attempts);
    console.log(
      `worker round trips (backlog): ${counters.claim} claim + ${counters.record} record for ${counters.attempts} attempts = ` +
        `${tripsPerDelivery.toFixed(3)} per delivery`,
    );
    console.log(
      `worker: ${BACKLOG} backlog events to ${BOTS} bots, median of ${ROUNDS} drains: ${Math.round(deliveryRate)} deliveries/s ` +
        `(ratio to the median bare loop ${(deliveryRate / baselineRate).toFixed(2)}, goal ≥ 0.5)`,
    );

    // 3. Latency at RATE events/s.
    const total = RATE * SECONDS;
    const keptBeforeLatency = await receiverKept(receiver.port);
    const producers = 32;
    const committed = new Map<string, number>();
    const start = nowMs() + 200;
    let lateStarts = 0;
    // Event k is due at start + k/RATE; a producer commits the events due by then in one
    // transaction (at most PER_TX), as a busy service would, and stamps them with the commit time.
    await Promise.all(
      Array.from({ length: producers }, async (_, p) => {
        for (let k = p * PER_TX; k < total; k += producers * PER_TX) {
          const last = Math.min(total, k + PER_TX) - 1;
          const due = start + (last * 1000) / RATE;
          const wait = due - nowMs();
          if (wait > 0) await new Promise((r) => setTimeout(r, wait));
          else if (wait < -50) lateStarts++;
          const emitted = await db.transaction(async (tx) => {
            const out = [];
            for (let j = k; j <= last; j++) {
              out.push(
                await emitEvent(tx, {
                  botId: bots[j % BOTS]!,
                  type: 'purchase.approved',
                  data,
                  at: Date.now(),
                }),
              );
            }
            return out;
          });
          const at = nowMs();
          for (const e of emitted) committed.set(e.id, at);
        }
      }),
    );
    const produceSeconds = (nowMs() - start) / 1000;
    const ids = [...committed.keys()];
    const lat = await waitForArrivals(receiver.port, ids, keptBeforeLatency, 60_000);
    const latencies = ids.map((id) => lat.arrivals[id]! - committed.get(id)!).sort((a, b) => a - b);
    const p50 = percentileOf(latencies, 50);
    const p99 = percentileOf(latencies, 99);
    console.log(
      `latency at ${RATE} events/s for ${SECONDS} s (achieved ${Math.round(total / produceSeconds)}/s, ${lateStarts} late): ` +
        `commit-to-receipt p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms (goal p99 ≤ 100 ms)`,
    );
    const [dups] = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM webhook_deliveries WHERE status <> 'delivered'`,
    );
    const writes = await tableWrites(schema);
    const events = writes.events?.ins ?? 0;
    console.log(
      `row writes per event (pg_stat_user_tables, both phases, ${events} events): ` +
        Object.entries(writes)
          .map(
            ([table, w]) =>
              `${table} ins ${(w.ins / events).toFixed(2)} upd ${(w.upd / events).toFixed(2)} (hot ${(w.hot / events).toFixed(2)})` +
              (w.del ? ` del ${(w.del / events).toFixed(2)}` : ''),
          )
          .join('; '),
    );
    const final = await receiverStats(receiver.port);
    console.log(
      `receiver saw ${final.count - 2000 - ROUNDS * BACKLOG} webhook requests for ${WARMUP + ROUNDS * BACKLOG + total} events; ${dups!.n} deliveries not delivered`,
    );
    await saveResults('webhooks', [
      {
        benchmark: 'webhooks',
        database: 'postgres',
        metric: `deliveries/s to a loopback receiver (backlog, median of ${ROUNDS} alternated with the bare loop's)`,
        value: deliveryRate,
        baseline: 'bare undici POST loop req/s',
        baselineValue: baselineRate,
        ratio: deliveryRate / baselineRate,
        goal: '≥ 0.5',
      },
      {
        benchmark: 'webhooks',
        database: 'postgres',
        metric: `commit-to-receipt p99 ms at ${RATE} events/s`,
        value: p99,
        baseline: 'commit-to-receipt p50 ms',
        baselineValue: p50,
        ratio: p99 / Math.max(0.001, p50),
        goal: 'p99 ≤ 100 ms',
      },
      cpuBudgetRow(
        {
          benchmark: 'webhooks',
          database: 'postgres',
          metric: 'CPU µs per delivery: worker + receiver + PostgreSQL (backlog)',
        },
        deliveryCpuUs,
        0.5,
        baselineRate,
      ),
      {
        benchmark: 'webhooks',
        database: 'postgres',
        metric: 'worker process CPU µs per delivery (backlog)',
        value: workerCpuPerDelivery * 1000,
        baseline: 'bare undici loop CPU µs per request',
        baselineValue: baselineCpuPerRequest * 1000,
        ratio: workerCpuPerDelivery / baselineCpuPerRequest,
        goal: '-',
      },
    ]);
    console.log(
      JSON.stringify({
        benchmark: 'webhooks',
        database: 'postgres',
        baseline_rps: Math.round(baselineRate),
        deliveries_per_second: Math.round(deliveryRate),
        ratio: Number((deliveryRate / baselineRate).toFixed(2)),
        rate: RATE,
        p50_ms: Number(p50.toFixed(1)),
        p99_ms: Number(p99.toFixed(1)),
      }),
    );
  } finally {
    if (worker) await stopChild(worker.child);
    receiver.child.kill('SIGTERM');
    await db.close();
    const c = new pg.Client({ connectionString: DATABASE_URL });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
  }
}
