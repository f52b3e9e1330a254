import { type ChildProcess, spawn } from 'node:child_process';
import { openSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { request as undiciRequest } from 'undici';
import { freePort } from '../test/support/process.ts';
import {
  benchSchema,
  CORES,
  coresBusyPercent,
  cpuBudgetRow,
  cpuBudgetUs,
  cpuOf,
  measure,
  readResults,
  saveResults,
  stopWithBench,
} from './lib.ts';

// Requests per second and p99 through the managed tunnel as a ratio to the same requests sent
// straight to the bot's receiver in the same run, two ways:
//   - the SDK's tunnel (`@botpay/client/tunnel`, issue 34): autocannon → relay in the service →
//     WebSocket → the bot's own process, whose handler answers (no local HTTP hop, no third
//     process). Goal (issues 17, 34): throughput ≥ 0.35 of direct and p99 ≤ 3 × direct.
//   - `botpay tunnel` (for bots in other languages): relay → WebSocket → the client process →
//     local receiver over HTTP. Shown beside it, no goal of its own.
//
// Every party is its own process on 127.0.0.1 (service with the embedded database, tunnel client,
// receiver, the SDK bot), so the load generator shares an event loop with none of them.
//   npm run bench:tunnel            (BENCH_SECONDS=10, BENCH_CONNECTIONS=20 by default)

if (process.argv[3] === 'receiver') {
  // The webhook receiver: answers every POST with a small JSON body, like a bot would.
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(Number(process.argv[4]), '127.0.0.1', () => console.log('receiver ready'));
} else if (process.argv[3] === 'sdk') {
  // A bot whose process opens its tunnel with the SDK and answers like the receiver above.
  const { openTunnel } = await import('../packages/client/src/tunnel/index.ts');
  const answer = {
    status: 200,
    headers: { 'content-type': 'application/json', 'x-bot': 'sdk' },
    body: '{"ok":true}',
  };
  const tunnel = openTunnel({ server: process.argv[4] ?? '', handler: () => answer });
  await tunnel.waitConnected();
  console.log('sdk bot ready');
  process.once('SIGTERM', () => void tunnel.close().then(() => process.exit(0)));
} else {
  await main();
  await clusterBench();
}

async function main(): Promise<void> {
  const seconds = Number(process.env.BENCH_SECONDS ?? 10);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 20);
  const dataDir = await mkdtemp(join(tmpdir(), 'botpay-bench-tunnel-'));
  const children: ChildProcess[] = [];
  try {
    const receiverPort = await freePort();
    children.push(start(['bin/run-ts.mjs', 'bench/tunnel.ts', 'receiver', String(receiverPort)], {}));
    const servicePort = await freePort();
    const base = `http://127.0.0.1:${servicePort}`;
    children.push(
      start(['bin/botpay.mjs', 'serve'], {
        PORT: String(servicePort),
        HOST: '127.0.0.1',
        BASE_URL: base,
        DATA_DIR: dataDir,
        LOG_LEVEL: 'warn',
      }),
    );
    await waitFor(async () => (await fetch(`${base}/healthz`)).ok);
    await waitFor(async () => (await fetch(`http://127.0.0.1:${receiverPort}/`, { method: 'POST' })).ok);

    const registration = await fetch(`${base}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        bot_name: 'bench-tunnel',
        owner_email: 'bench@example.com',
        bot_type: 'custom',
        local_port: receiverPort,
        webhook_path: '/webhook',
      }),
    });
    if (registration.status !== 201) throw new Error(`registration failed: ${registration.status}`);
    const bot = (await registration.json()) as {
      webhook_url: string;
      tunnel_token: string;
      tunnel_setup: { tunnel_client_command: string };
    };
    const host = new URL(bot.webhook_url).host;
    // BOTPAY_TUNNEL_TOKEN=<token> botpay tunnel …: the assignment is the client's environment.
    const [, , ...args] = bot.tunnel_setup.tunnel_client_command.split(' ');
    // The client logs one line per request; like under systemd, that goes to a file, not to a
    // pipe this (busy) process would have to drain.
    const clientLog = openSync(join(dataDir, 'client.log'), 'w');
    children.push(start(['bin/botpay.mjs', ...args], { BOTPAY_TUNNEL_TOKEN: bot.tunnel_token }, clientLog));
    await waitFor(async () => {
      const res = await undiciRequest(`${base}/webhook`, { method: 'POST', headers: { host } });
      await res.body.dump();
      if (res.statusCode !== 200 && process.env.BENCH_DEBUG) console.log(res.statusCode);
      return res.statusCode === 200;
    });

    const body = JSON.stringify({
      event: 'wallet.funded',
      timestamp: new Date().toISOString(),
      bot_id: 'bot_bench',
      data: { funding_id: 'fund_bench', amount: 25, balance: 125, description: 'Owner added $25.00' },
    });
    const request = {
      method: 'POST' as const,
      body,
      headers: {
        'content-type': 'application/json',
        'x-service-event': 'wallet.funded',
        'x-service-signature': `sha256=${'0'.repeat(64)}`,
      },
    };
    const parties = {
      bench: process.pid,
      receiver: children[0]!.pid!,
      service: children[1]!.pid!,
      client: children[2]!.pid!,
    };
    const direct = await run(
      { url: `http://127.0.0.1:${receiverPort}/webhook`, ...request },
      seconds,
      connections,
      parties,
    );
    const tunnel = await run(
      { url: `${base}/webhook`, ...request, headers: { ...request.headers, host } },
      seconds,
      connections,
      parties,
    );
    const logged = readFileSync(join(dataDir, 'client.log'), 'utf8').split('\n').length;

    // The SDK's tunnel: the same bot's process opens the tunnel (replacing `botpay tunnel`, which
    // is stopped first) and answers in its handler.
    await stop(children[2]!);
    const sdk = start(['bin/run-ts.mjs', 'bench/tunnel.ts', 'sdk', base], {
      BOTPAY_TUNNEL_TOKEN: bot.tunnel_token,
    });
    children.push(sdk);
    await waitFor(async () => {
      const res = await undiciRequest(`${base}/webhook`, { method: 'POST', headers: { host } });
      await res.body.dump();
      return res.statusCode === 200 && res.headers['x-bot'] === 'sdk';
    });
    const sdkTunnel = await run(
      { url: `${base}/webhook`, ...request, headers: { ...request.headers, host } },
      seconds,
      connections,
      { bench: process.pid, service: parties.service, bot: sdk.pid! },
    );

    const ratio = sdkTunnel.rps / direct.rps;
    const p99Ratio = sdkTunnel.p99 / Math.max(0.001, direct.p99);
    const cliRatio = tunnel.rps / direct.rps;
    const cliP99Ratio = tunnel.p99 / Math.max(0.001, direct.p99);
    const met = ratio >= 0.35 && p99Ratio <= 3;
    console.log(`\nPOST ${body.length} B JSON, ${connections} connections, ${seconds} s each`);
    console.log(`direct to receiver      : ${fmt(direct)}`);
    console.log(`through \`botpay tunnel\` : ${fmt(tunnel)}`);
    console.log(`through the SDK tunnel  : ${fmt(sdkTunnel)}`);
    console.log(
      `SDK tunnel ÷ direct     : ${ratio.toFixed(2)} (goal ≥ 0.35); p99 ratio ${p99Ratio.toFixed(1)} (goal ≤ 3) ${met ? 'OK' : 'BELOW GOAL'}`,
    );
    console.log(
      `botpay tunnel ÷ direct  : ${cliRatio.toFixed(2)}; p99 ratio ${cliP99Ratio.toFixed(1)}; client log lines ${logged}`,
    );
    // Every process on the path, summed: the goal's rate leaves at most CORES × 10⁶ ÷ (0.35 ×
    // direct req/s) µs per request among them.
    const sumUs = (r: Result) => Object.values(r.cpuPerRequestUs).reduce((a, b) => a + b, 0);
    console.log(
      `CPU per request, all processes: direct ${sumUs(direct)} µs, botpay tunnel ${sumUs(tunnel)} µs, SDK tunnel ${sumUs(sdkTunnel)} µs; ` +
        `in use: direct ${coresBusyPercent(direct.rps, sumUs(direct)).toFixed(0)} %, ` +
        `SDK tunnel ${coresBusyPercent(sdkTunnel.rps, sumUs(sdkTunnel)).toFixed(0)} % of ${CORES} cores; ` +
        `0.35 × direct leaves ${cpuBudgetUs(0.35 * direct.rps).toFixed(0)} µs`,
    );
    await saveResults('tunnel', [
      {
        benchmark: 'tunnel',
        database: '-',
        metric: `requests/s through the SDK tunnel (${connections} conn)`,
        value: sdkTunnel.rps,
        baseline: 'requests/s direct to the receiver',
        baselineValue: direct.rps,
        ratio,
        goal: '≥ 0.35',
      },
      {
        benchmark: 'tunnel',
        database: '-',
        metric: 'p99 ms through the SDK tunnel',
        value: sdkTunnel.p99,
        baseline: 'p99 ms direct',
        baselineValue: direct.p99,
        ratio: p99Ratio,
        goal: '≤ 3',
      },
      cpuBudgetRow(
        {
          benchmark: 'tunnel',
          database: '-',
          metric: 'CPU µs per request through the SDK tunnel: load generator + service + bot',
        },
        sumUs(sdkTunnel),
        0.35,
        direct.rps,
      ),
      {
        benchmark: 'tunnel',
        database: '-',
        metric: `requests/s through \`botpay tunnel\` (${connections} conn)`,
        value: tunnel.rps,
        baseline: 'requests/s direct to the receiver',
        baselineValue: direct.rps,
        ratio: cliRatio,
        goal: '-',
      },
      {
        benchmark: 'tunnel',
        database: '-',
        metric: 'p99 ms through `botpay tunnel`',
        value: tunnel.p99,
        baseline: 'p99 ms direct',
        baselineValue: direct.p99,
        ratio: cliP99Ratio,
        goal: '-',
      },
    ]);
    if (tunnel.errors > 0 || tunnel.non2xx > 0 || sdkTunnel.errors > 0 || sdkTunnel.non2xx > 0) {
      process.exitCode = 1;
    }
  } finally {
    for (const child of children.reverse()) await stop(child);
    await rm(dataDir, { recursive: true, force: true });
  }
}

interface Result {
  /** CPU time per request of each process (µs), from /proc: independent of other load on the machine. */
  cpuPerRequestUs: Record<string, number>;
  /** Of which in the kernel (stime: system calls, loopback TCP), µs per request. */
  sysPerRequestUs: Record<string, number>;
  /** Write system calls per request of each process (/proc/<pid>/io syscw): deterministic, not load-dependent. */
  writesPerRequest: Record<string, number>;
  /** Read system calls per request (syscr: reads, and epoll waits do not count). */
  readsPerRequest: Record<string, number>;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

async function run(
  options: autocannon.Options,
  seconds: number,
  connections: number,
  parties: Record<string, number>,
): Promise<Result> {
  await autocannon({ ...options, connections, duration: 2 }); // warm-up (JIT, pools), not counted
  const before = Object.fromEntries(Object.entries(parties).map(([name, pid]) => [name, cpuOf(pid)]));
  const writesBefore = Object.fromEntries(
    Object.entries(parties).map(([name, pid]) => [name, ioCalls(pid, 'syscw')]),
  );
  const readsBefore = Object.fromEntries(
    Object.entries(parties).map(([name, pid]) => [name, ioCalls(pid, 'syscr')]),
  );
  const { result: r, p50Ms, p99Ms } = await measure({ ...options, connections, duration: seconds });
  const cpuPerRequestUs: Record<string, number> = {};
  const sysPerRequestUs: Record<string, number> = {};
  const writesPerRequest: Record<string, number> = {};
  const readsPerRequest: Record<string, number> = {};
  const total = Math.max(1, r.requests.total);
  for (const [name, pid] of Object.entries(parties)) {
    const cpu = cpuOf(pid);
    cpuPerRequestUs[name] = Math.round(((cpu.totalMs - before[name]!.totalMs) * 1000) / total);
    sysPerRequestUs[name] = Math.round(((cpu.sysMs - before[name]!.sysMs) * 1000) / total);
    writesPerRequest[name] = (ioCalls(pid, 'syscw') - writesBefore[name]!) / total;
    readsPerRequest[name] = (ioCalls(pid, 'syscr') - readsBefore[name]!) / total;
  }
  return {
    cpuPerRequestUs,
    sysPerRequestUs,
    writesPerRequest,
    readsPerRequest,
    rps: r.requests.average,
    p50: p50Ms,
    p99: p99Ms,
    errors: r.errors + r.timeouts,
    non2xx: r.non2xx,
  };
}

function fmt(r: Result): string {
  const calls = (perRequest: Record<string, number>) =>
    Object.entries(perRequest)
      .filter(([name, n]) => n > 0.005 && name !== 'bench')
      .map(([name, n]) => `${name} ${n.toFixed(2)}`)
      .join(', ');
  const cpu = Object.entries(r.cpuPerRequestUs)
    .filter(([, us]) => us > 0)
    .map(([name, us]) => `${name} ${us} (sys ${r.sysPerRequestUs[name]})`)
    .join(', ');
  return `${Math.round(r.rps)} req/s, p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms, errors ${r.errors}, non-2xx ${r.non2xx}\n                     CPU µs/request: ${cpu}\n                     write syscalls/request: ${calls(r.writesPerRequest)}; reads: ${calls(r.readsPerRequest)}`;
}

/** Write (syscw: write, writev, send…) or read (syscr) system calls a process has made so far (0 when unreadable). */
function ioCalls(pid: number, field: 'syscw' | 'syscr'): number {
  try {
    const io = readFileSync(`/proc/${pid}/io`, 'utf8');
    return Number(new RegExp(`^${field}: (\\d+)$`, 'm').exec(io)?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** utime + stime of a process, and stime alone, in clock ticks (1/100 s on Linux). */
function start(
  args: string[],
  env: Record<string, string>,
  stdout: 'inherit' | number = 'inherit',
): ChildProcess {
  // BENCH_PROFILE=dir writes a CPU profile of every child there (node --cpu-prof).
  const profile = process.env.BENCH_PROFILE
    ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE}`]
    : [];
  // BENCH_NODE_FLAGS='--trace-gc …': more node flags for every child (some are refused in NODE_OPTIONS).
  const flags = process.env.BENCH_NODE_FLAGS?.split(' ').filter(Boolean) ?? [];
  return stopWithBench(
    spawn(process.execPath, [...profile, ...flags, ...args], {
      env: { ...process.env, ...env },
      stdio: ['ignore', stdout, 'inherit'],
    }),
  );
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

async function waitFor(check: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await check()) return;
    } catch (error) {
      if (process.env.BENCH_DEBUG) console.log(error);
    }
    if (Date.now() > deadline) throw new Error('timed out waiting for a benchmark process');
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Instances sharing tunnels (PostgreSQL, docs/tunnels.md#several-instances): the same POST through
 * an instance that does not hold the tunnel (one more local HTTP hop to the holder) as a ratio to
 * through the holder itself, appended to the tunnel results. Skipped when PostgreSQL is unreachable
 * (BENCH_DATABASE_URL or TEST_DATABASE_URL).
 */
async function clusterBench(): Promise<void> {
  const seconds = Number(process.env.BENCH_SECONDS ?? 10);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 20);
  let schema: Awaited<ReturnType<typeof benchSchema>>;
  try {
    schema = await benchSchema();
  } catch (error) {
    console.log(`\nnon-holder instance: skipped (PostgreSQL unreachable: ${(error as Error).message})`);
    return;
  }
  const children: ChildProcess[] = [];
  const dataDir = await mkdtemp(join(tmpdir(), 'botpay-bench-cluster-'));
  try {
    const receiverPort = await freePort();
    children.push(start(['bin/run-ts.mjs', 'bench/tunnel.ts', 'receiver', String(receiverPort)], {}));
    const env = {
      DATABASE_URL: schema.url,
      SECRET_KEY: 'bench-secret-key-0123456789abcdef0123456789abcdef',
      ROLES: 'all',
    };
    const services: Array<{ url: string; process: ChildProcess }> = [];
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const child = start(['bin/botpay.mjs', 'serve'], {
        ...env,
        PORT: String(port),
        HOST: '127.0.0.1',
        LOG_LEVEL: 'warn',
      });
      children.push(child);
      await waitFor(async () => (await fetch(`${url}/readyz`)).ok);
      services.push({ url, process: child });
    }
    const [holder, other] = services as [(typeof services)[0], (typeof services)[0]];
    const registration = await fetch(`${holder.url}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        bot_name: 'bench-cluster',
        owner_email: 'bench@example.com',
        bot_type: 'custom',
        local_port: receiverPort,
        webhook_path: '/webhook',
      }),
    });
    if (registration.status !== 201) throw new Error(`registration failed: ${registration.status}`);
    const bot = (await registration.json()) as { webhook_url: string; tunnel_token: string };
    const host = new URL(bot.webhook_url).host;
    const clientLog = openSync(join(dataDir, 'client.log'), 'w');
    children.push(
      start(
        [
          'bin/botpay.mjs',
          'tunnel',
          '--server',
          holder.url,
          '--port',
          String(receiverPort),
          '--path',
          '/webhook',
        ],
        { BOTPAY_TUNNEL_TOKEN: bot.tunnel_token },
        clientLog,
      ),
    );
    for (const s of services) {
      await waitFor(async () => {
        const res = await undiciRequest(`${s.url}/webhook`, { method: 'POST', headers: { host } });
        await res.body.dump();
        return res.statusCode === 200;
      });
    }
    const request = {
      method: 'POST' as const,
      body: JSON.stringify({ event: 'wallet.funded', data: { amount: 25 } }),
      headers: { 'content-type': 'application/json', host },
    };
    const parties = {
      holder: holder.process.pid!,
      other: other.process.pid!,
      client: children[3]!.pid!,
      receiver: children[0]!.pid!,
    };
    const direct = await run({ url: `${holder.url}/webhook`, ...request }, seconds, connections, parties);
    const forwarded = await run({ url: `${other.url}/webhook`, ...request }, seconds, connections, parties);
    const ratio = forwarded.rps / direct.rps;
    console.log(`\ntwo instances on PostgreSQL, ${connections} connections, ${seconds} s each`);
    console.log(`through the holder      : ${fmt(direct)}`);
    console.log(`through a non-holder    : ${fmt(forwarded)}`);
    console.log(`non-holder ÷ holder     : ${ratio.toFixed(2)}`);
    const previous = (await readResults('tunnel'))?.rows ?? [];
    await saveResults('tunnel', [
      ...previous.filter((r) => !r.metric.includes('non-holder')),
      {
        benchmark: 'tunnel',
        database: 'postgres',
        metric: `requests/s through a non-holder instance (${connections} conn)`,
        value: forwarded.rps,
        baseline: 'requests/s through the holder instance',
        baselineValue: direct.rps,
        ratio,
        goal: '-',
      },
      {
        benchmark: 'tunnel',
        database: 'postgres',
        metric: 'p99 ms through a non-holder instance',
        value: forwarded.p99,
        baseline: 'p99 ms through the holder',
        baselineValue: direct.p99,
        ratio: forwarded.p99 / Math.max(1, direct.p99),
        goal: '-',
      },
    ]);
    if (forwarded.errors > 0 || forwarded.non2xx > 0) process.exitCode = 1;
  } finally {
    for (const child of children.reverse()) await stop(child);
    await schema.drop();
    await rm(dataDir, { recursive: true, force: true });
  }
}
