import type { IncomingMessage, ServerResponse } from 'node:http';
import { answerWith, readRawBody, sendJson } from './node.ts';
import { createWebhookReceiver, type WebhookReceiverOptions } from './receiver.ts';

// Typed by what the middleware uses of Express (a Node request with `body`, a Node response, and
// `next`), not by importing 'express': its types are a separate package (@types/express) that a
// JavaScript project or one with its own types need not install. Express's Request, Response and
// NextFunction fit these, so `app.post(path, expressWebhook(…))` type-checks as before.

/** The request as Express hands it over: Node's, with the body a parser may have set. */
export interface ExpressWebhookRequest extends IncomingMessage {
  body?: unknown;
}

/** Express's `next`. */
export type ExpressNext = (error?: unknown) => void;

/** An Express request handler. */
export type ExpressWebhookHandler = (
  req: ExpressWebhookRequest,
  res: ServerResponse,
  next: ExpressNext,
) => void;

/**
 * Express 5 middleware for the webhook route: `app.post('/webhook', expressWebhook({ secret, onEvent }))`.
 * Mount it before (or instead of) `express.json()` for this path: the signature covers the raw bytes,
 * so it reads the body itself (or takes the Buffer left by `express.raw()`).
 */
export function expressWebhook(options: WebhookReceiverOptions): ExpressWebhookHandler {
  const receiver = createWebhookReceiver(options);
  return (req, res, next) => {
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
