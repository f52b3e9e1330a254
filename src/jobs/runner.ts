import type { Role } from '../config.ts';
import type { AppContext } from '../platform/context.ts';

// Background work of an instance, chosen by its roles. Every job is safe to run on several
// instances at once: queue work is claimed with FOR UPDATE SKIP LOCKED, leader-only work sits
// behind an advisory lock.

export interface BackgroundJob {
  name: string;
  role: Role;
  start(ctx: AppContext): Promise<{ stop(): Promise<void> }>;
}

/** A job that runs `tick` every `intervalMs` (never overlapping itself) until stopped. */
export function intervalJob(
  name: string,
  role: Role,
  intervalMs: number,
  tick: (ctx: AppContext) => Promise<void>,
): BackgroundJob {
  return {
    name,
    role,
    async start(ctx) {
      let stopped = false;
      let running: Promise<void> = Promise.resolve();
      const run = () => {
        running = tick(ctx).catch((error) =>
          ctx.logger.warn({ err: error, job: name }, 'background job failed'),
        );
      };
      const timer = setInterval(() => {
        if (!stopped) running = running.then(run);
      }, intervalMs);
      timer.unref();
      return {
        async stop() {
          stopped = true;
          clearInterval(timer);
          await running;
        },
      };
    },
  };
}

export async function startJobs(
  ctx: AppContext,
  jobs: readonly BackgroundJob[],
): Promise<{ stop(): Promise<void> }> {
  const running: Array<{ stop(): Promise<void> }> = [];
  for (const job of jobs) {
    if (!ctx.config.roles.has(job.role)) continue;
    running.push(await job.start(ctx));
    ctx.logger.info({ job: job.name }, 'background job started');
  }
  return {
    async stop() {
      await Promise.all(running.map((r) => r.stop()));
    },
  };
}
