// Throughput of the Node webhook middleware (verify + parse + dedupe + answer) against a bare
// http server that answers 200 to the same requests, measured in the same run on loopback.
//   node bin/run-ts.mjs packages/client/scripts/bench-webhooks.ts [seconds]
import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import autocannon from 'autocannon';
import { createNodeWebhookHandler } from '../src/webhooks/node.ts';
import { signPayload } from '../src/webhooks/verify.ts';

const seconds = Number(process.argv[3] ?? process.argv[2] ?? 5) || 5;
const secret = `whsec_${'ab'.repeat(24)}`;
const body = JSON.stringify({
  id: 'evt_bench',
  event: 'wallet.funded',
  timestamp: new Date().toISOString(),
  bot_id: 'bot_bench',
  data: { amount_usd: 25, balance_usd: 100 },
});
const headers = {
  'content-type': 'application/json',
  'x-service-signature': signPayload(body, secret),
  'x-service-event': 'wallet.funded',
};

async function measure(name: string, listener: RequestListener): Promise<number> {
  const server = createServer(listener);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const result = await autocannon({
    url: `http://127.0.0.1:${port}/webhook`,
    method: 'POST',
    headers,
    body,
    connections: 10,
    duration: seconds,
  });
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  const rps = result.requests.average;
  console.log(
    `${name}: ${Math.round(rps)} req/s, p50 ${result.latency.p50} ms, p99 ${result.latency.p99} ms, non-2xx ${result.non2xx}`,
  );
  return rps;
}

// Alternating rounds, so that load from other processes hits both sides alike; the median ratio
// is reported.
const bareListener: RequestListener = (req, res) => {
  req.on('data', () => {});
  req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"received":true}'));
};
// Dedupe off: every request is the same event, and we measure the full path, handler included.
const middlewareListener = createNodeWebhookHandler({ secret, dedupe: false, onEvent: () => {} });
const ratios: number[] = [];
for (let round = 1; round <= 3; round++) {
  const bare = await measure(`round ${round} bare server (reads body, answers 200)`, bareListener);
  const middleware = await measure(
    `round ${round} webhook middleware (verify, parse, handler)`,
    middlewareListener,
  );
  ratios.push(middleware / bare);
}
ratios.sort((a, b) => a - b);
console.log(
  `median ratio middleware / bare: ${ratios[1]!.toFixed(2)} (rounds: ${ratios.map((r) => r.toFixed(2)).join(', ')})`,
);
