import { checkoutDecisions } from '../spend/job.ts';
import { pruneSignInRecords } from '../dashboard/sessions.ts';
import { ownerMailJob } from '../notifications/job.ts';
import { tasksEngine } from '../tasks/job.ts';
import { topupExpiry } from '../topups/job.ts';
import { webhookDeliveryJob } from '../webhooks/job.ts';
import { x402Reconcile } from '../x402/job.ts';
import { retentionJob } from './retention.ts';
import { type BackgroundJob, intervalJob } from './runner.ts';

const pruneSignIns = intervalJob('prune-sign-in-records', 'worker', 3_600_000, (ctx) =>
  pruneSignInRecords(ctx.db, ctx.clock.now()),
);

/** Every background job of the service; each module adds its own here. */
export const ALL_JOBS: readonly BackgroundJob[] = [
  retentionJob,
  pruneSignIns,
  webhookDeliveryJob,
  checkoutDecisions,
  tasksEngine,
  ownerMailJob,
  topupExpiry,
  x402Reconcile,
];
