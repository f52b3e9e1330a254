import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

export type Script = (req: RecordedRequest, res: ServerResponse, index: number) => void;

/**
 * A real HTTP server on 127.0.0.1 that answers each request with the next step of a script: the
 * edge of the world for tests of retries and polling (the service itself is tested elsewhere).
 */
export async function scriptedServer(script: Script): Promise<{
  url: string;
  requests: RecordedRequest[];
  close(): Promise<void>;
  server: Server;
}> {
  const requests: RecordedRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const recorded = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      requests.push(recorded);
      script(recorded, res, requests.length - 1);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function json(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
) {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

/** Drops the connection without an answer (what a crashed proxy or a reset looks like). */
export function hangUp(res: ServerResponse) {
  res.socket?.destroy();
}

/** A sleep that returns at once and records what it was asked to wait. */
export function recordingSleep() {
  const waits: number[] = [];
  return {
    waits,
    sleep: async (ms: number, signal?: AbortSignal) => {
      if (signal?.aborted) throw signal.reason;
      waits.push(ms);
    },
  };
}

export const API_KEY = `svc_live_${'ab'.repeat(24)}`;
