import { intervalJob } from '../jobs/runner.ts';
import { expireDueTopups } from './service.ts';

// Expires top-up requests the owner left unanswered (wallet.topup_expired to the bot). Any worker
// instance may run it: rows are claimed with SKIP LOCKED. Until it runs, an overdue request already
// reads as expired and no longer counts as open.
export const topupExpiry = intervalJob('topup-expiry', 'worker', 60_000, async (ctx) => {
  await expireDueTopups(ctx);
});
