import { spawn } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type BenchRow, DURATION_SECONDS, percentileOf, saveResults, stopWithBench } from './lib.ts';
import {
  type BenchService,
  type CheckoutBot,
  call,
  checkoutLoad,
  openOwnerGuardrails,
  seedCheckoutBot,
  startBenchService,
} from './seed.ts';

// npm run bench:overload — how an instance behaves at its peak (issue 32), on each database:
//
// 1. /healthz p99 under load ÷ idle. A prober in a process of its own asks /healthz one request at
//    a time every PROBE_INTERVAL_MS, first with the service idle, then while 32 connections send
//    checkouts as fast as they are answered (the service sheds what it cannot take: 503
//    overloaded). Goal ≤ 10: the event loop stays free (the embedded database on its own thread).
//    Then far past capacity, while the service sheds: bursts of BURST checkouts sent at once by
//    clients that honour Retry-After (the next burst a second after the last answer; the issue's
//    600 parallel checkouts), goal ≤ 10 as well; and, shown without a goal, BURST_CLIENTS
//    connections that send again the moment they are answered, Retry-After or not.
//    With it: the mean checkout latency clients saw ÷ the mean the service measured itself
//    (botpay_http_request_duration_seconds over the same requests): ≈ 1 when requests do not
//    queue in front of the event loop, unseen by the service's own figures (goal ≤ 1.5 for the
//    embedded database, where its queries used to hold the loop).
// 2. Webhook fairness: healthy bots' delivery lag p99 (receipt − the event's timestamp) while 5
//    bots' receivers hang (never answer; WEBHOOK_TIMEOUT_MS ends each attempt) and 5 answer 500,
//    ÷ the same while those 10 answer like the healthy ones. The events are the same in both phases
//    (every bot funded at the same pace): only the 10 receivers' behaviour differs. Goal ≤ 2.

const CLIENTS = 32;
/** Checkouts sent at once in each burst past capacity (answered 503 overloaded beyond it). */
const BURST = Number(process.env.BENCH_BURST ?? 600);
/** Connections that send again at once, ignoring Retry-After. */
const BURST_CLIENTS = Number(process.env.BENCH_BURST_CLIENTS ?? 400);
const PROBE_INTERVAL_MS = 20;
const IDLE_PROBE_SECONDS = Number(process.env.BENCH_IDLE_PROBE_SECONDS ?? 5);
const LOAD_BOTS = 16;
const FAIRNESS_SECONDS = Number(process.env.BENCH_FAIRNESS_SECONDS ?? 15);
const HEALTHY_BOTS = 10;
const HANGING_BOTS = 5;
const FAILING_BOTS = 5;
/** Fundings (each a `wallet.funded` event) per bot and second. */
const EVENTS_PER_BOT_SECOND = Number(process.env.BENCH_EVENTS_PER_BOT_SECOND ?? 2);

if (process.argv.includes('--prober')) {
  await prober();
} else {
  await main();
}

/** Child: GET /healthz one at a time for `seconds`; prints the latencies (ms) as JSON. */
async function prober(): Promise<void> {
  const url = process.argv[process.argv.indexOf('--prober') + 1] ?? '';
  const seconds = Number(process.argv[process.argv.indexOf('--prober') + 2]);
  const times: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const started = performance.now();
    try {
      const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(30_000) });
      await res.arrayBuffer();
      if (res.ok) times.push(performance.now() - started);
    } catch {
      times.push(30_000);
    }
    const left = PROBE_INTERVAL_MS - (performance.now() - started);
    if (left > 0) await new Promise((r) => setTimeout(r, left));
  }
  process.stdout.write(`${JSON.stringify(times)}\n`);
}

/** /healthz latencies measured by a prober process over `seconds`. */
function probe(url: string, seconds: number): Promise<number[]> {
  const child = stopWithBench(
    spawn(process.execPath, ['bin/run-ts.mjs', 'bench/overload.ts', '--prober', url, String(seconds)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  let out = '';
  child.stdout.on('data', (d) => {
    out += String(d);
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => {
      if (code !== 0) reject(new Error(`prober exited with ${code}`));
      else resolve(JSON.parse(out.trim()) as number[]);
    });
  });
}

function p99(values: number[]): number {
  return percentileOf(Float64Array.from(values).sort(), 99);
}

/** The service's own sum and count of checkout latencies (all statuses), from /metrics. */
async function checkoutHistogram(url: string): Promise<{ sum: number; count: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  let count = 0;
  for (const m of text.matchAll(
    /^botpay_http_request_duration_seconds_(sum|count)\{[^}]*route="\/api\/v1\/bot\/merchant\/checkout"[^}]*\} (\S+)$/gm,
  )) {
    if (m[1] === 'sum') sum += Number(m[2]);
    else count += Number(m[2]);
  }
  return { sum, count };
}

async function healthUnderLoad(svc: BenchService): Promise<BenchRow[]> {
  const url = svc.child.url;
  const ownerAuth = { authorization: `Bearer ${svc.ownerToken}` };
  await openOwnerGuardrails(url, ownerAuth);
  const bots: CheckoutBot[] = [];
  for (let i = 0; i < LOAD_BOTS; i++) {
    bots.push(
      await seedCheckoutBot(url, ownerAuth, {
        name: `peak-${i}`,
        ownerEmail: 'bench@example.com',
        approvalMode: 'auto_approve_under_threshold',
      }),
    );
  }
  const idle = await probe(url, IDLE_PROBE_SECONDS);
  await checkoutLoad(url, CLIENTS, bots, 2); // warm-up, not counted
  const before = await checkoutHistogram(url);
  const [loaded, result] = await Promise.all([
    probe(url, DURATION_SECONDS),
    checkoutLoad(url, CLIENTS, bots, DURATION_SECONDS),
  ]);
  const after = await checkoutHistogram(url);
  const serviceMeanMs = ((after.sum - before.sum) / Math.max(1, after.count - before.count)) * 1000;
  const shed = result.non2xx;
  const [shedding, waves] = await Promise.all([
    probe(url, DURATION_SECONDS),
    bursts(url, bots, DURATION_SECONDS),
  ]);
  const [bursting, burst] = await Promise.all([
    probe(url, DURATION_SECONDS),
    checkoutLoad(url, BURST_CLIENTS, bots, DURATION_SECONDS),
  ]);
  console.log(
    `${svc.database}: /healthz p99 idle ${p99(idle).toFixed(1)} ms, under load ${p99(loaded).toFixed(1)} ms (max ${Math.max(...loaded).toFixed(0)}); ` +
      `checkouts ${Math.round(result['2xx'] / DURATION_SECONDS)}/s answered 2xx, ${shed} not (shed or refused), ${result.errors + result.timeouts} errors; ` +
      `mean latency seen by clients ${result.latency.mean.toFixed(1)} ms, by the service ${serviceMeanMs.toFixed(1)} ms`,
  );
  console.log(
    `${svc.database}: bursts of ${BURST}: /healthz p99 ${p99(shedding).toFixed(1)} ms (max ${Math.max(...shedding).toFixed(0)}); ` +
      `${waves.bursts} bursts, ${waves.ok} approved, ${waves.shed} answered 503 overloaded, ${waves.other} other answers`,
  );
  console.log(
    `${svc.database}: ${BURST_CLIENTS} connections: /healthz p99 ${p99(bursting).toFixed(1)} ms (max ${Math.max(...bursting).toFixed(0)}); ` +
      `checkouts ${Math.round(burst['2xx'] / DURATION_SECONDS)}/s answered 2xx, ${burst.non2xx} not (shed: 503 overloaded), ${burst.errors + burst.timeouts} errors`,
  );
  return [
    {
      benchmark: 'overload',
      database: svc.database,
      metric: `health p99 under load ÷ idle (${CLIENTS} checkout connections)`,
      value: p99(loaded),
      baseline: 'health p99 ms idle',
      baselineValue: p99(idle),
      ratio: p99(loaded) / Math.max(0.001, p99(idle)),
      goal: '≤ 10',
    },
    {
      benchmark: 'overload',
      database: svc.database,
      metric: `checkout mean ms seen by clients ÷ logged by the service (${CLIENTS} conn)`,
      value: result.latency.mean,
      baseline: 'mean ms the service measured',
      baselineValue: serviceMeanMs,
      ratio: result.latency.mean / Math.max(0.001, serviceMeanMs),
      // The goal is the embedded default's (its queries used to hold the loop, so requests
      // waited unseen before the service's clock started); on PostgreSQL it is shown for comparison.
      goal: svc.database === 'embedded' ? '≤ 1.5' : '-',
    },
    {
      benchmark: 'overload',
      database: svc.database,
      metric: `health p99 while shedding ÷ idle (bursts of ${BURST} checkouts honouring Retry-After; ${waves.shed} answered 503)`,
      value: p99(shedding),
      baseline: 'health p99 ms idle',
      baselineValue: p99(idle),
      ratio: p99(shedding) / Math.max(0.001, p99(idle)),
      goal: '≤ 10',
    },
    {
      benchmark: 'overload',
      database: svc.database,
      metric: `health p99 ÷ idle, ${BURST_CLIENTS} connections ignoring Retry-After (${burst.non2xx} answered 503)`,
      value: p99(bursting),
      baseline: 'health p99 ms idle',
      baselineValue: p99(idle),
      ratio: p99(bursting) / Math.max(0.001, p99(idle)),
      goal: '-',
    },
  ];
}

/**
 * Bursts of BURST checkouts sent at once for `seconds`, each after the previous one was answered
 * and a second (Retry-After) passed, as clients that honour it would: how many were approved,
 * refused 503 overloaded, or answered otherwise.
 */
async function bursts(url: string, bots: CheckoutBot[], seconds: number) {
  const end = Date.now() + seconds * 1000;
  const counts = { bursts: 0, ok: 0, shed: 0, other: 0 };
  let i = 0;
  while (Date.now() < end) {
    counts.bursts++;
    const statuses = await Promise.all(
      Array.from({ length: BURST }, async () => {
        const bot = bots[i++ % bots.length];
        if (!bot) throw new Error('no bots');
        try {
          const res = await fetch(`${url}/api/v1/bot/merchant/checkout`, {
            method: 'POST',
            headers: { authorization: bot.auth, 'content-type': 'application/json' },
            body: JSON.stringify({
              profile_index: bot.profile,
              merchant_name: 'Burst Store',
              merchant_url: 'https://burst.example/item',
              item_name: 'Widget',
              amount_cents: 100,
              category: 'retail',
            }),
            signal: AbortSignal.timeout(30_000),
          });
          await res.arrayBuffer();
          return res.status;
        } catch {
          return 0;
        }
      }),
    );
    for (const status of statuses) {
      if (status === 200) counts.ok++;
      else if (status === 503) counts.shed++;
      else counts.other++;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  return counts;
}

interface Arrival {
  bot: string;
  lagMs: number;
  at: number;
}

/**
 * The receivers of every bot: /ok answers 200 and records; /hang never answers and /fail answers 500
 * while `misbehave` is set, and answer 200 (unrecorded) otherwise.
 */
async function startReceivers() {
  const arrivals: Arrival[] = [];
  const mode = { misbehave: false };
  const hanging = new Set<ServerResponse>();
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '';
      if (!path.startsWith('/ok') && !mode.misbehave) {
        res.writeHead(200).end('ok');
        return;
      }
      if (path.startsWith('/hang')) {
        hanging.add(res);
        res.once('close', () => hanging.delete(res));
        return;
      }
      if (path.startsWith('/fail')) {
        res.writeHead(500).end('no');
        return;
      }
      const now = Date.now();
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          event: string;
          timestamp: string;
        };
        if (body.event === 'wallet.funded')
          arrivals.push({ bot: path.slice(4), lagMs: now - Date.parse(body.timestamp), at: now });
      } catch {}
      res.writeHead(200).end('ok');
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    arrivals,
    mode,
    url: (path: string) => `http://127.0.0.1:${port}${path}`,
    async close() {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

async function fairness(svc: BenchService): Promise<BenchRow> {
  const url = svc.child.url;
  const owner = { authorization: `Bearer ${svc.ownerToken}` };
  const receivers = await startReceivers();
  try {
    const bot = async (name: string, path: string) => {
      const reg = await call(
        `${url}/api/v1/bots/register`,
        'POST',
        {},
        {
          bot_name: name,
          owner_email: 'bench@example.com',
          callback_url: receivers.url(path),
        },
      );
      await call(`${url}/api/v1/owner/claims`, 'POST', owner, { claim_token: reg.claim_token });
      return String(reg.bot_id);
    };
    const healthy: string[] = [];
    for (let i = 0; i < HEALTHY_BOTS; i++) healthy.push(await bot(`fair-ok-${i}`, `/ok/${i}`));
    const bad: string[] = [];
    for (let i = 0; i < HANGING_BOTS; i++) bad.push(await bot(`fair-hang-${i}`, '/hang'));
    for (let i = 0; i < FAILING_BOTS; i++) bad.push(await bot(`fair-fail-${i}`, '/fail'));

    // Fundings at a steady pace for `bots`, each a wallet.funded event; returns when the phase ends.
    // Fundings at a steady pace for `bots`, each a wallet.funded event, for `seconds`: how many
    // of the healthy bots' were answered 200 (events to wait for).
    const fundAtPace = async (bots: string[], seconds: number) => {
      const end = Date.now() + seconds * 1000;
      const interval = 1000 / EVENTS_PER_BOT_SECOND;
      const inFlight: Promise<boolean>[] = [];
      const healthySet = new Set(healthy);
      for (let tick = Date.now(); tick < end; tick += interval) {
        for (const id of bots) {
          inFlight.push(
            call(`${url}/api/v1/owner/bots/${id}/wallet/fund`, 'POST', owner, { amount_cents: 1 }).then(
              () => healthySet.has(id),
              () => false,
            ),
          );
        }
        const wait = tick + interval - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      }
      return (await Promise.all(inFlight)).filter(Boolean).length;
    };
    const phase = async (misbehave: boolean) => {
      receivers.mode.misbehave = misbehave;
      const started = Date.now();
      const expected = await fundAtPace([...healthy, ...bad], FAIRNESS_SECONDS);
      const ended = Date.now();
      // The healthy bots' events of the phase, once all arrived (or after a minute).
      const inPhase = () =>
        receivers.arrivals.filter((a) => a.at - a.lagMs >= started && a.at - a.lagMs <= ended);
      for (let i = 0; i < 600 && inPhase().length < expected; i++)
        await new Promise((r) => setTimeout(r, 100));
      if (inPhase().length < expected)
        console.warn(
          `${svc.database}: ${expected - inPhase().length} of ${expected} healthy deliveries missing`,
        );
      return inPhase().map((a) => a.lagMs);
    };
    const answering = await phase(false);
    const withBad = await phase(true);
    console.log(
      `${svc.database}: healthy bots' delivery lag p99 ${p99(answering).toFixed(0)} ms with every receiver answering (${answering.length} deliveries), ` +
        `${p99(withBad).toFixed(0)} ms while ${HANGING_BOTS} other bots' receivers hang and ${FAILING_BOTS} answer 500 (${withBad.length})`,
    );
    return {
      benchmark: 'overload',
      database: svc.database,
      metric: `healthy bots' webhook lag p99 beside ${HANGING_BOTS} hanging + ${FAILING_BOTS} failing receivers ÷ the same bots answering`,
      value: p99(withBad),
      baseline: 'lag p99 ms, every receiver answering',
      baselineValue: p99(answering),
      ratio: p99(withBad) / Math.max(0.001, p99(answering)),
      goal: '≤ 2',
    };
  } finally {
    await receivers.close();
  }
}

async function main(): Promise<void> {
  const rows: BenchRow[] = [];
  const only = process.env.BENCH_OVERLOAD_PARTS?.split(',') ?? ['health', 'fairness'];
  for (const database of (process.env.BENCH_OVERLOAD_DATABASES?.split(',') ?? [
    'postgres',
    'embedded',
  ]) as Array<'postgres' | 'embedded'>) {
    if (only.includes('health')) {
      const svc = await startBenchService(database, { ROLES: 'api' });
      try {
        rows.push(...(await healthUnderLoad(svc)));
      } finally {
        await svc.stop();
      }
    }
    if (only.includes('fairness')) {
      const svc = await startBenchService(database, { WEBHOOK_TIMEOUT_MS: '10000' });
      try {
        rows.push(await fairness(svc));
      } finally {
        await svc.stop();
      }
    }
  }
  await saveResults('overload', rows);
}
