import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { answerWith, readRawBody, sendJson } from './node.ts';
import { createWebhookReceiver, type WebhookReceiverOptions } from './receiver.ts';

/**
 * Express 5 middleware for the webhook route: `app.post('/webhook', expressWebhook({ secret, onEvent }))`.
 * Mount it before (or instead of) `express.json()` for this path: the signature covers the raw bytes,
 * so it reads the body itself (or takes the Buffer left by `express.raw()`).
 */
export function expressWebhook(options: WebhookReceiverOptions): RequestHandler {
  const receiver = createWebhookReceiver(options);
  return (req: Request, res: Response, next: NextFunction) => {
    const parsed: unknown = req.body;
    let raw: Promise<Buffer>;
    if (Buffer.isBuffer(parsed)) raw = Promise.resolve(parsed);
    else if (parsed === undefined && !req.readableEnded) raw = readRawBody(req, receiver.maxBodyBytes);
    else {
      next(
        new Error(
          'expressWebhook needs the raw body: register it before express.json() for this path, or use express.raw({ type: "*/*" }).',
        ),
      );
      return;
    }
    raw
      .then((body) => answerWith(receiver, req, res, body))
      .catch((error: { status?: number }) => {
        if (res.headersSent) return;
        if (error.status === 413) sendJson(res, 413, { error: 'payload_too_large' });
        else next(error);
      });
  };
}
