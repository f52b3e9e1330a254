import { intervalJob } from '../jobs/runner.ts';
import { runTasksOnce } from './engine.ts';

// The task engine (scheduled tasks, decoy planning and release, expiry), on instances with the
// scheduler role. Leader-only inside (advisory lock), so several scheduler instances are safe.
export const TASKS_TICK_MS = 30_000;
export const tasksEngine = intervalJob('tasks-engine', 'scheduler', TASKS_TICK_MS, async (ctx) => {
  await runTasksOnce(ctx);
});
