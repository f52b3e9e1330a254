import { type BackgroundJob, intervalJob } from '../jobs/runner.ts';
import { reconcileAll } from './reconcile.ts';

// Settlement and reconciliation of partner wallets (src/x402/reconcile.ts) every
// X402_RECONCILE_SECONDS; nothing to do without X402_NETWORK. Safe on several instances: each
// wallet is reconciled under its row lock, once per new block.
export const x402Reconcile: BackgroundJob = {
  name: 'x402-reconcile',
  role: 'worker',
  async start(ctx) {
    const cfg = ctx.config.x402;
    if (!cfg) return { async stop() {} };
    return intervalJob('x402-reconcile', 'worker', cfg.reconcileSeconds * 1000, reconcileAll).start(ctx);
  },
};
