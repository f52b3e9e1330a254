import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TunnelClient, type TunnelClientOptions } from '../../src/tunnels/client.ts';
import { createTestService, registerBot, type TestService } from '../support/service.ts';

export interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  body: Buffer;
}

/**
 * A real webhook receiver on 127.0.0.1: records every request and echoes it back as JSON
 * (`/slow` waits before answering, `/status/<n>` answers that status, `/big` answers 2 MB).
 */
export async function startReceiver(name = 'receiver'): Promise<{
  port: number;
  received: Received[];
  close(): Promise<void>;
}> {
  const received: Received[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      received.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body,
      });
      const url = req.url ?? '/';
      const answer = () => {
        if (url.startsWith('/big')) {
          res.writeHead(200, { 'content-type': 'application/octet-stream' });
          res.end(Buffer.alloc(2 * 1024 * 1024, 1));
          return;
        }
        const status = /^\/status\/(\d{3})/.exec(url)?.[1];
        res.writeHead(status ? Number(status) : 200, [
          'content-type',
          'application/octet-stream',
          'x-receiver',
          name,
          'set-cookie',
          'a=1',
          'set-cookie',
          'b=2',
        ]);
        res.end(body.length > 0 ? body : `${req.method} ${url}`);
      };
      if (url.startsWith('/slow')) setTimeout(answer, 2_000);
      else answer();
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export async function listen(svc: TestService, port = 0): Promise<number> {
  await svc.app.listen({ port, host: '127.0.0.1' });
  return (svc.app.server.address() as AddressInfo).port;
}

/**
 * What the relay tests stand on: a test service listening on 127.0.0.1 (so tunnel clients can
 * connect), its address, and a real receiver on loopback. `close` stops both.
 */
export async function startRelayService(env: Record<string, string> = {}): Promise<{
  svc: TestService;
  port: number;
  server: string;
  receiver: Awaited<ReturnType<typeof startReceiver>>;
  close(): Promise<void>;
}> {
  const svc = await createTestService({ env });
  const port = await listen(svc);
  const receiver = await startReceiver();
  return {
    svc,
    port,
    server: `http://127.0.0.1:${port}`,
    receiver,
    async close() {
      await svc.close();
      await receiver.close();
    },
  };
}

export interface TunnelBot {
  bot_id: string;
  api_key: string;
  webhook_secret: string;
  webhook_url: string;
  tunnel_token: string;
  primary_hooks_token?: string;
  claim_token: string | null;
  hostname: string;
  webhook_path: string;
}

/**
 * Registers a tunnel bot. The relay-mechanics tests send any method to any path, so by default the
 * bot's tunnel forwards everything (what an owner allows with `forward: "all"`); pass
 * `{ forward: 'webhook_only' }` for the registration default (test/tunnels/policy.test.ts).
 */
export async function registerTunnelBot(
  svc: TestService,
  localPort: number,
  body: Record<string, unknown> = {},
  options: { forward?: 'all' | 'webhook_only' } = {},
): Promise<TunnelBot> {
  const bot = (await registerBot(svc, { callback_url: undefined, local_port: localPort, ...body })) as Record<
    string,
    unknown
  >;
  if ((options.forward ?? 'all') === 'all') {
    await svc.ctx.db.query("UPDATE bots SET tunnel_forward = 'all' WHERE id = $1", [bot.bot_id]);
  }
  const webhookUrl = new URL(bot.webhook_url as string);
  return {
    ...(bot as unknown as TunnelBot),
    hostname: webhookUrl.hostname,
    webhook_path: webhookUrl.pathname,
  };
}

export function startClient(
  options: Partial<TunnelClientOptions> & Pick<TunnelClientOptions, 'server' | 'token' | 'port'>,
) {
  const lines: string[] = [];
  const client = new TunnelClient({
    backoffInitialMs: 50,
    backoffMaxMs: 400,
    log: (line) => lines.push(line),
    ...options,
  });
  const exit = client.run();
  return { client, exit, lines };
}

export interface HttpResult {
  status: number;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  body: Buffer;
}

/** A real HTTP request to the service on 127.0.0.1 with the given Host header. */
export function hostRequest(
  servicePort: number,
  host: string,
  options: { method?: string; path?: string; headers?: Record<string, string>; body?: Buffer | string } = {},
): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port: servicePort,
        method: options.method ?? 'GET',
        path: options.path ?? '/',
        headers: { host, ...options.headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            rawHeaders: res.rawHeaders,
            body: Buffer.concat(chunks),
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

export { until } from '../support/wait.ts';
