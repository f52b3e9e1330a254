import type { IncomingMessage, ServerResponse } from 'node:http';
import { createWebhookReceiver, type WebhookReceiver, type WebhookReceiverOptions } from './receiver.ts';

/** Reads the whole body as bytes, stopping (rejecting with status 413) past `limit`. */
export function readRawBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit) {
      reject(Object.assign(new Error('payload too large'), { status: 413 }));
      req.resume();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.length;
      if (size > limit) {
        failed = true;
        reject(Object.assign(new Error('payload too large'), { status: 413 }));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!failed) resolve(Buffer.concat(chunks));
    });
    req.on('error', (error) => {
      if (!failed) reject(error);
    });
  });
}

export function sendJson(res: ServerResponse, status: number, body: Record<string, unknown>): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** Answers one request with `receiver`, given the raw body already read. */
export async function answerWith(
  receiver: WebhookReceiver,
  req: IncomingMessage,
  res: ServerResponse,
  rawBody: Buffer,
): Promise<void> {
  const answer = await receiver.handle(req.method, req.headers, rawBody);
  sendJson(res, answer.status, answer.body);
  answer.dispatch?.();
}

/**
 * A request listener for Node's http server: `http.createServer(createNodeWebhookHandler({...}))`,
 * or call it from your own listener for the webhook path. Verifies X-Service-Signature over the raw
 * body (401 when wrong), parses, deduplicates by event id, answers 200 at once and then calls
 * `onEvent`.
 */
export function createNodeWebhookHandler(
  options: WebhookReceiverOptions,
): (req: IncomingMessage, res: ServerResponse) => void {
  const receiver = createWebhookReceiver(options);
  return (req, res) => {
    readRawBody(req, receiver.maxBodyBytes)
      .then((raw) => answerWith(receiver, req, res, raw))
      .catch((error: { status?: number }) => {
        if (res.headersSent) return;
        if (error.status === 413) {
          res.setHeader('connection', 'close');
          sendJson(res, 413, { error: 'payload_too_large' });
        } else sendJson(res, 400, { error: 'bad_request' });
      });
  };
}
