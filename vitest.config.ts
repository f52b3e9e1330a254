import { defineConfig } from 'vitest/config';

// `npm test` runs the whole suite on the embedded database; with TEST_DATABASE_URL set it runs it
// again on PostgreSQL (a second project), so one command covers both legs.
const postgresUrl = process.env.TEST_DATABASE_URL;

const shared = {
  include: ['test/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
  exclude: ['test/browser/**', '**/node_modules/**'],
  testTimeout: 30_000,
  hookTimeout: 60_000,
  globalSetup: ['test/support/globalSetup.ts'],
  // A worker runs its files one after another in one module graph instead of importing the service
  // afresh for each file: that import cost about 3 s of CPU per file, a third of the suite's time on
  // a 2-core machine. Files share nothing else: each builds its own service, database and clock,
  // and the service keeps no state per module that another service could see (src/spend/job.ts
  // keeps its pruning time per service for this reason).
  isolate: false,
};

export default defineConfig({
  test: {
    // Two cores: a few files at a time keeps PGlite instances from starving each other.
    maxWorkers: 2,
    projects: [
      { test: { ...shared, name: 'embedded', env: { TEST_DB: 'pglite' } } },
      ...(postgresUrl ? [{ test: { ...shared, name: 'postgres', env: { TEST_DB: 'postgres' } } }] : []),
      {
        test: {
          name: 'browser',
          include: ['test/browser/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          globalSetup: ['test/support/globalSetup.ts'],
          env: { TEST_DB: 'pglite' },
        },
      },
    ],
  },
});
