// The webhook worker's CPU per delivery, A/B in one process (issue 34): the DeliveryWorker code of
// two worktrees (A and B, e.g. main and a branch), each against a fake database (a claim or
// recording call answers after 1 ms with the rows it asked for: no pg, no SQL) and the same
// loopback receiver (a child process, whose CPU is not counted). Rounds of ROUND deliveries
// alternate A, B, B, A, … so that the shared machine's load falls on both alike; each round's
// figure is this process's CPU (all threads) per delivery. Prints both medians and the median of
// the pairwise differences (B − A); a run with the same worktree on both sides shows the noise.
// The request store's async hooks are enabled first, as in the service (its first HTTP request).
//
//   A=/work/main B=/path/to/worktree node bin/run-ts.mjs bench/webhookWorkerAB.ts
//   (ROUNDS=30 pairs, ROUND=5000 deliveries; ALS_AB=1: A with the request store's hooks, B without)
import { spawn } from 'node:child_process';
const [dirA, dirB] = [process.env.A!, process.env.B!];
const ROUNDS = Number(process.env.ROUNDS ?? 30);
const ROUND = Number(process.env.ROUND ?? 5000);
const BOTS = 50;

const receiver = spawn(
  process.execPath,
  [
    '-e',
    `
  const http = require('node:http');
  const s = http.createServer((req, res) => { req.resume(); req.on('end', () => { res.writeHead(200); res.end('ok'); }); });
  s.keepAliveTimeout = 30000;
  s.listen(0, '127.0.0.1', () => process.stdout.write('PORT ' + s.address().port + '\\n'));
`,
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
const port: number = await new Promise((r) =>
  receiver.stdout!.on('data', (d) => {
    const m = /PORT (\d+)/.exec(String(d));
    if (m) r(Number(m[1]));
  }),
);

async function load(dir: string) {
  const w = await import(`${dir}/src/webhooks/worker.ts`);
  const crypto = await import(`${dir}/src/platform/crypto.ts`);
  const metrics = await import(`${dir}/src/platform/metrics.ts`);
  const gate = await import(`${dir}/src/platform/db/gate.ts`);
  return {
    DeliveryWorker: w.DeliveryWorker,
    createSecretBox: crypto.createSecretBox,
    createMetrics: metrics.createMetrics,
    runAsRequest: gate.runAsRequest,
  };
}
const A = await load(dirA);
const B = await load(dirB);
// As in the service: the first HTTP request (readyz) enables the request store (async hooks on every promise).
const ALS = process.env.ALS_AB === '1';
const { AsyncLocalStorage } = await import('node:async_hooks');
const als = new AsyncLocalStorage();
if (!ALS) {
  A.runAsRequest(() => {});
  B.runAsRequest(() => {});
}

const box = A.createSecretBox('bench-secret-key-0123456789abcdef0123456789abcdef');
const bots = Array.from({ length: BOTS }, (_, i) => ({
  id: `bot_${String(i).padStart(16, '0')}`,
  enc: box.encrypt(`whsec_${Buffer.from(`secret-${i}-0123456789abcdef012345`).toString('base64')}`),
}));
const body = JSON.stringify({
  id: 'evt_x',
  event: 'purchase.approved',
  timestamp: new Date().toISOString(),
  bot_id: bots[0]!.id,
  data: { checkout_id: 'chk_benchbenchbench', amount: 12.5, vendor: 'bench', description: 'x'.repeat(60) },
});
let seq = 0;
function rows(n: number) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const k = seq++;
    const bot = bots[k % BOTS]!;
    out.push({
      id: `dlv_${String(k).padStart(20, '0')}`,
      event_id: `evt_${String(k).padStart(20, '0')}`,
      bot_id: bot.id,
      event_type: 'purchase.approved',
      attempts: 0,
      body: body.replace('evt_x', `evt_${String(k).padStart(20, '0')}`),
      callback_url: `http://127.0.0.1:${port}/hook`,
      tunnel_hostname: null,
      webhook_path: null,
      hooks_token_enc: null,
      webhook_secret_enc: bot.enc,
      webhook_secret_prev_enc: null,
    });
  }
  return out;
}
let remaining = 0;
let done = 0;
let calls = 0;
let onDone: (() => void) | undefined;
const tick = () => new Promise((r) => setTimeout(r, 1));
const db = {
  kind: 'postgres',
  async query(_sql: string, params: unknown[]) {
    await tick();
    const n = Math.min(remaining, Number(params[4]));
    remaining -= n;
    return rows(n);
  },
  async write(_sql: string, params: unknown[]) {
    await tick();
    done += (params[0] as unknown[]).length;
    calls++;
    if (done >= ROUND && onDone) {
      const f = onDone;
      onDone = undefined;
      setImmediate(f);
    }
    if (!params[16]) return [];
    const n = Math.min(remaining, Number(params[18]));
    remaining -= n;
    return rows(n);
  },
  async listen() {
    return async () => {};
  },
  load() {
    return {
      size: 1,
      inUse: 0,
      waiting: 0,
      oldestWaitMs: 0,
      maxWaitMs: 0,
      waitCounts: [],
      waitSumSeconds: 0,
      refused: 0,
    };
  },
};
const logger = {
  trace() {},
  debug() {},
  info() {},
  warn(...a: unknown[]) {
    console.error(...a);
  },
  error() {},
  fatal() {},
  isLevelEnabled: () => false,
  child() {
    return logger;
  },
  level: 'warn',
};
function ctxOf(m: typeof A) {
  return {
    config: {
      webhookTimeoutMs: 10_000,
      allowPrivateWebhookTargets: true,
      webhookRetryDelaysSeconds: [60, 300],
    },
    db,
    clock: { now: () => Date.now() },
    secrets: box,
    logger,
    metrics: m.createMetrics(db as never),
  };
}
const workers = { A: new A.DeliveryWorker(ctxOf(A)), B: new B.DeliveryWorker(ctxOf(B)) };
async function round(name: 'A' | 'B') {
  const w = workers[name];
  remaining = ROUND;
  done = 0;
  calls = 0;
  const finished = new Promise<void>((r) => {
    onDone = r;
  });
  if (ALS) {
    if (name === 'A') als.run({}, () => {});
    else als.disable();
  }
  const cpu0 = process.cpuUsage();
  w.wake();
  await finished;
  const c = process.cpuUsage(cpu0);
  trips[name]!.push(calls);
  return (c.user + c.system) / ROUND;
}
const res: Record<string, number[]> = { A: [], B: [] };
const trips: Record<string, number[]> = { A: [], B: [] };
await workers.A.start();
await workers.B.start();
await round('A');
await round('B'); // warm-up
for (let i = 0; i < ROUNDS; i++)
  for (const n of (i % 2 ? ['B', 'A'] : ['A', 'B']) as ('A' | 'B')[]) res[n]!.push(await round(n));
const med = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
console.log(`A ${res.A!.map((x) => x.toFixed(1)).join(' ')}  median ${med(res.A!).toFixed(1)} µs/delivery`);
console.log(`B ${res.B!.map((x) => x.toFixed(1)).join(' ')}  median ${med(res.B!).toFixed(1)} µs/delivery`);
const diffs = res.A!.map((a, i) => res.B![i]! - a);
console.log(
  `B − A per pair: ${diffs.map((x) => x.toFixed(1)).join(' ')}  median ${med(diffs).toFixed(1)} µs; load ${(await import('node:os')).loadavg()[0]!.toFixed(2)}`,
);
console.log(`record calls per round: A ${trips.A!.join(' ')}; B ${trips.B!.join(' ')}`);
{
  const fs = await import('node:fs');
  const byName = new Map<string, number>();
  for (const t of fs.readdirSync('/proc/self/task')) {
    const stat = fs.readFileSync(`/proc/self/task/${t}/stat`, 'utf8');
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(f[11]) + Number(f[12]);
    byName.set(`${comm}#${t}`, ticks);
  }
  console.log('CPU ticks by thread:', [...byName].map(([k, v]) => `${k}=${v}`).join(' '));
}
receiver.kill();
process.exit(0);
