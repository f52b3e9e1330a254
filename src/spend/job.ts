import { intervalJob } from '../jobs/runner.ts';
import { processDueConfirmations } from './holds.ts';
import { pruneIdempotencyKeys } from './idempotency.ts';

// Expires held purchases of both rails when their window elapses (and prunes old x402
// Idempotency-Keys). Every instance with the worker role may run it (rows are claimed with SKIP LOCKED).
// When each running service last pruned (per service, not per module: several services share a
// process in tests, each on a clock of its own).
const lastPrune = new WeakMap<object, number>();
export const checkoutDecisions = intervalJob('checkout-decisions', 'worker', 2_000, async (ctx) => {
  await processDueConfirmations(ctx);
  const now = ctx.clock.now();
  if (Math.abs(now - (lastPrune.get(ctx) ?? Number.NEGATIVE_INFINITY)) > 600_000) {
    lastPrune.set(ctx, now);
    await pruneIdempotencyKeys(ctx.db, now);
  }
});
