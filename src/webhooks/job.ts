import type { BackgroundJob } from '../jobs/runner.ts';
import { DeliveryWorker } from './worker.ts';

/** Sends webhook deliveries on every instance with the `worker` role (they share the queue). */
export const webhookDeliveryJob: BackgroundJob = {
  name: 'webhook-deliveries',
  role: 'worker',
  async start(ctx) {
    const worker = new DeliveryWorker(ctx);
    await worker.start();
    return { stop: () => worker.stop() };
  },
};
