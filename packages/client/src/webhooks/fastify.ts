import type { FastifyPluginAsync } from 'fastify';
import { createWebhookReceiver, type WebhookReceiverOptions } from './receiver.ts';

export interface FastifyWebhookOptions extends WebhookReceiverOptions {
  /** The route to receive deliveries on, e.g. `/webhook` (your registration's webhook_path). */
  path: string;
}

/**
 * A Fastify plugin that adds `POST <path>`: `app.register(fastifyWebhook, { path, secret, onEvent })`.
 * Registered without fastify-plugin on purpose: its raw-body parser stays inside its own
 * encapsulation context, so the rest of your app keeps parsing JSON as usual.
 */
export const fastifyWebhook: FastifyPluginAsync<FastifyWebhookOptions> = async (instance, options) => {
  const receiver = createWebhookReceiver(options);
  instance.removeAllContentTypeParsers();
  instance.addContentTypeParser(
    '*',
    { parseAs: 'buffer', bodyLimit: receiver.maxBodyBytes },
    (_req, body, done) => done(null, body),
  );
  instance.post(options.path, { bodyLimit: receiver.maxBodyBytes }, async (request, reply) => {
    const raw = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
    const answer = await receiver.handle(request.method, request.headers, raw);
    reply.code(answer.status).send(answer.body);
    answer.dispatch?.();
    return reply;
  });
};
