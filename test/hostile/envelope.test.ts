import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen } from '../tunnels/helpers.ts';
import { createTestService, type TestService } from '../support/service.ts';

// Issue 14 item 15: errors raised before routing — a path parameter longer than the router allows
// (Fastify's maxParamLength, 414), a malformed percent-escape in the path (400), and what Node's
// HTTP parser refuses itself (a request line or headers over 16 KB: 431; a broken request line:
// 400) — use the one error envelope {"error": code, "message": text}, not Fastify's
// {"error":"Bad Request","code":…,"statusCode":…}. Checked over a raw socket, as a client sees it.

let svc: TestService;
let port: number;

beforeAll(async () => {
  svc = await createTestService({ env: { LOG_LEVEL: 'silent' } });
  port = await listen(svc);
});
afterAll(async () => {
  await svc.close();
});

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Writes `text` as is on a new connection and parses the one answer (the server may close). */
function raw(text: string): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const finish = () => {
      const all = Buffer.concat(chunks).toString('latin1');
      const split = all.indexOf('\r\n\r\n');
      if (split < 0) return reject(new Error(`no answer: ${JSON.stringify(all.slice(0, 200))}`));
      const [statusLine, ...lines] = all.slice(0, split).split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      let body = all.slice(split + 4);
      const length = headers['content-length'];
      if (length !== undefined) body = body.slice(0, Number(length));
      resolve({ status: Number(statusLine!.split(' ')[1]), headers, body });
    };
    socket.on('data', (c: Buffer) => {
      chunks.push(c);
      const all = Buffer.concat(chunks).toString('latin1');
      const split = all.indexOf('\r\n\r\n');
      const length = /\r\ncontent-length: *(\d+)/i.exec(all.slice(0, split))?.[1];
      if (split >= 0 && length !== undefined && all.length - split - 4 >= Number(length)) {
        socket.destroy();
        finish();
      }
    });
    socket.on('end', finish);
    socket.on('close', () => {});
    socket.on('error', (error) => (chunks.length > 0 ? finish() : reject(error)));
    socket.write(text);
  });
}

function expectEnvelope(answer: RawAnswer, status: number, code: string): void {
  expect(answer.status, answer.body).toBe(status);
  expect(answer.headers['content-type']).toMatch(/^application\/json/);
  const body = JSON.parse(answer.body) as Record<string, unknown>;
  expect(body.error).toBe(code);
  expect(typeof body.message).toBe('string');
  expect(Object.keys(body).sort()).toEqual(['error', 'message']);
}

describe('errors before routing use the one envelope', () => {
  it('a path parameter longer than the router allows: 414 uri_too_long', async () => {
    const long = 'a'.repeat(300);
    const answer = await raw(
      `GET /api/v1/owner/bots/bot_${long} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
    );
    expectEnvelope(answer, 414, 'uri_too_long');
    expect(answer.headers['x-request-id']).toBeTruthy();
    expect(answer.body).not.toContain(long); // the path is not echoed back
  });

  it('a malformed percent-escape in the path: 400 validation_error', async () => {
    for (const path of ['/api/v1/owner/bots/%E0%A4%A', '/api/v1/owner/bots/%zz', '/api/v1/owner/bots/%']) {
      const answer = await raw(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      expectEnvelope(answer, 400, 'validation_error');
    }
  });

  it('a request line over the parser limit: 431 headers_too_large', async () => {
    const answer = await raw(
      `GET /api/v1/bot/status?q=${'x'.repeat(20_000)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`,
    );
    expectEnvelope(answer, 431, 'headers_too_large');
  });

  it('a request Node cannot parse: 400 validation_error', async () => {
    const answer = await raw('GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n');
    expectEnvelope(answer, 400, 'validation_error');
  });

  it('inject() sees the same envelope for the router errors', async () => {
    const res = await svc.app.inject({ url: `/api/v1/owner/bots/bot_${'b'.repeat(300)}` });
    expect(res.statusCode).toBe(414);
    expect(res.json()).toEqual({ error: 'uri_too_long', message: expect.any(String) });
    const bad = await svc.app.inject({ url: '/api/v1/owner/bots/%zz' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual({ error: 'validation_error', message: expect.any(String) });
  });
});
