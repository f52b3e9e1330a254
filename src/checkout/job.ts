import { intervalJob } from '../jobs/runner.ts';
import { processDueConfirmations } from './decisions.ts';
import { pruneIdempotencyKeys } from './idempotency.ts';

// Expires pending confirmations when their window elapses and decides held decoys at their
// planned time. Every instance with the worker role may run it (rows are claimed with SKIP LOCKED).
let lastPrune = 0;
export const checkoutDecisions = intervalJob('checkout-decisions', 'worker', 2_000, async (ctx) => {
  await processDueConfirmations(ctx);
  const now = ctx.clock.now();
  if (now - lastPrune > 600_000) {
    lastPrune = now;
    await pruneIdempotencyKeys(ctx.db, now);
  }
});
