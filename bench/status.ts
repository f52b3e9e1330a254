import { type BenchRow, load, saveResults, startChild } from './lib.ts';
import { seedBots, startBenchService } from './seed.ts';

// Authenticated GET /api/v1/bot/status at 50 connections, as a ratio to a Fastify hello-world
// route measured in the same run. Goal: ≥ 0.5 on PostgreSQL, with p99 ≤ 3 × hello-world's.
// BENCH_CPU_PROF=<dir> writes a CPU profile of each service run there (bench/lib.ts).
const CONNECTIONS = 50;

const hello = await startChild('bench/baseline/hello.ts', {});
const baseline = await load({ url: `${hello.url}/hello`, connections: CONNECTIONS });
await hello.stop();
console.log(
  `hello-world: ${Math.round(baseline.requestsPerSecond)} req/s, p99 ${baseline.p99Ms.toFixed(2)} ms`,
);

const rows: BenchRow[] = [];
// The third run turns the status cache off, to show what one database round trip per request costs.
const runs = [
  { database: 'postgres', cache: true },
  { database: 'embedded', cache: true },
  { database: 'postgres', cache: false },
] as const;
for (const { database, cache } of runs) {
  const label = cache ? '' : ' uncached (STATUS_CACHE_MS=0)';
  const svc = await startBenchService(database, cache ? {} : { STATUS_CACHE_MS: '0' });
  try {
    const bots = await seedBots(svc, 20, 10_000);
    let i = 0;
    const result = await load({
      url: svc.child.url,
      connections: CONNECTIONS,
      requests: [
        {
          method: 'GET',
          path: '/api/v1/bot/status',
          setupRequest: (req) => {
            const bot = bots[i++ % bots.length];
            if (!bot) throw new Error('seedBots returned no bots');
            return { ...req, headers: { ...req.headers, authorization: `Bearer ${bot.apiKey}` } };
          },
        },
      ],
    });
    if (result.errors || result.non2xx)
      console.warn(`${database}: ${result.errors} errors, ${result.non2xx} non-2xx`);
    console.log(
      `${database}${label} status: ${Math.round(result.requestsPerSecond)} req/s, p99 ${result.p99Ms.toFixed(2)} ms`,
    );
    rows.push(
      {
        benchmark: 'status',
        database,
        metric: `GET /api/v1/bot/status req/s (50 conn)${label}`,
        value: result.requestsPerSecond,
        baseline: 'hello-world req/s',
        baselineValue: baseline.requestsPerSecond,
        ratio: result.requestsPerSecond / baseline.requestsPerSecond,
        goal: database === 'postgres' && cache ? '≥ 0.5' : '-',
      },
      {
        benchmark: 'status',
        database,
        metric: `status p99 ms${label}`,
        value: result.p99Ms,
        baseline: 'hello-world p99 ms',
        baselineValue: baseline.p99Ms,
        ratio: result.p99Ms / Math.max(0.001, baseline.p99Ms),
        goal: database === 'postgres' && cache ? '≤ 3' : '-',
      },
    );
  } finally {
    await svc.stop();
  }
}
await saveResults('status', rows);
