import { intervalJob } from '../jobs/runner.ts';
import { processDueConfirmations } from './holds.ts';
import { pruneIdempotencyKeys } from './idempotency.ts';

// Expires held purchases of both rails when their window elapses (and prunes old x402
// Idempotency-Keys). Every instance with the worker role may run it (rows are claimed with SKIP LOCKED).
let lastPrune = 0;
export const checkoutDecisions = intervalJob('checkout-decisions', 'worker', 2_000, async (ctx) => {
  await processDueConfirmations(ctx);
  const now = ctx.clock.now();
  if (now - lastPrune > 600_000) {
    lastPrune = now;
    await pruneIdempotencyKeys(ctx.db, now);
  }
});
