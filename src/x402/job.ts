import { intervalJob } from '../jobs/runner.ts';
import { reconcileAll } from './reconcile.ts';

// Settlement and reconciliation of partner wallets (src/x402/reconcile.ts) every
// X402_RECONCILE_SECONDS. Safe on several instances: each wallet is reconciled under its row lock,
// once per new block.
export const x402Reconcile = intervalJob('x402-reconcile', 'worker', 5_000, async (ctx) => {
  const cfg = ctx.config.x402;
  if (!cfg) return;
  const now = ctx.clock.now();
  if (now - lastRun < cfg.reconcileSeconds * 1000) return;
  lastRun = now;
  await reconcileAll(ctx);
});
let lastRun = 0;
