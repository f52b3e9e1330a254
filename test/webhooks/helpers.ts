import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { emitEvent, type EventType } from '../../src/events/outbox.ts';
import type { LocalTunnelRelay, RelayedRequest } from '../../src/platform/context.ts';
import type { TestService } from '../support/service.ts';

export interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

type Responder = (req: Received, res: ServerResponse) => void;

/** A real HTTP receiver on 127.0.0.1 that records every request. */
export class Receiver {
  readonly requests: Received[] = [];
  respond: Responder = (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
  };
  private server: Server | undefined;
  private waiters: Array<() => void> = [];
  port = 0;

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const received: Received = {
          method: req.method ?? '',
          url: req.url ?? '',
          headers: req.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          at: Date.now(),
        };
        this.requests.push(received);
        for (const w of this.waiters.splice(0)) w();
        this.respond(received, res);
      });
    });
    this.server.keepAliveTimeout = 5_000;
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  url(path = '/hook'): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  /** Resolves when `predicate` holds for the requests so far (checked on each arrival). */
  async waitFor(predicate: (requests: Received[]) => boolean, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(this.requests)) {
      const left = deadline - Date.now();
      if (left <= 0)
        throw new Error(
          `receiver: condition not met after ${timeoutMs} ms (${this.requests.length} requests)`,
        );
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 200));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/** Emits one event for a bot in its own transaction, as the modules do. */
export async function emit(
  svc: TestService,
  botId: string,
  type: EventType = 'wallet.funded',
  data: Record<string, unknown> = { amount_usd: 1 },
) {
  return svc.ctx.db.transaction((tx) => emitEvent(tx, { botId, type, data, at: svc.clock.now() }));
}

/**
 * `n` due deliveries for a bot, an hour old (older than anything emitted afterwards), written as
 * their events in one statement (the events trigger makes each delivery and queue row).
 */
export async function backlog(svc: TestService, botId: string, n: number): Promise<void> {
  await svc.ctx.db.query(
    `INSERT INTO events (id, bot_id, type, body, created_at)
     SELECT $1 || lpad(g::text, 6, '0'), $2, 'wallet.funded', '{}', $3::timestamptz - interval '1 hour' + g * interval '1 millisecond'
       FROM generate_series(1, $4::int) g`,
    [`evt_${botId.slice(4)}x`, botId, new Date(svc.clock.now()), n],
  );
}

export async function deliveryOf(svc: TestService, eventId: string) {
  const rows = await svc.ctx.db.query<{
    id: string;
    status: string;
    attempts: number;
    next_attempt_at: Date;
    response_status: number | null;
    response_excerpt: string | null;
    error: string | null;
  }>('SELECT * FROM webhook_deliveries WHERE event_id = $1', [eventId]);
  return rows[0]!;
}

export async function healthOf(svc: TestService, botId: string) {
  const rows = await svc.ctx.db.query<{ webhook_status: string; webhook_fail_count: number }>(
    'SELECT webhook_status, webhook_fail_count FROM bots WHERE id = $1',
    [botId],
  );
  return rows[0]!;
}

/**
 * Stand-in for the tunnel relay another module provides (its port is LocalTunnelRelay): it forwards
 * to a real loopback receiver, so bytes and headers are observed on the wire.
 */
export class LoopbackRelay implements LocalTunnelRelay {
  readonly forwarded: RelayedRequest[] = [];
  connected = new Set<string>();
  constructor(private readonly receiver: Receiver) {}
  hasConnection(hostname: string): boolean {
    return this.connected.has(hostname);
  }
  async forward(req: RelayedRequest) {
    this.forwarded.push(req);
    const res = await request(`http://127.0.0.1:${this.receiver.port}${req.path}`, {
      method: 'POST',
      headers: { ...req.headers, 'x-relayed-for': req.hostname },
      body: req.body,
    });
    const body = Buffer.from(await res.body.arrayBuffer());
    return { status: res.statusCode, headers: {}, body };
  }
}
