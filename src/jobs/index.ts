import { checkoutDecisions } from '../checkout/job.ts';
import { tasksEngine } from '../tasks/job.ts';
import { type BackgroundJob, housekeeping } from './runner.ts';

/** Every background job of the service; each module adds its own here. */
export const ALL_JOBS: readonly BackgroundJob[] = [housekeeping, checkoutDecisions, tasksEngine];
