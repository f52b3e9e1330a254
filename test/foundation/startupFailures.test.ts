import { createServer } from 'node:net';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isPostgres } from '../support/db.ts';
import { freePort, runCli } from '../support/process.ts';

// Start-up failures an operator meets first print one line saying what is wrong and exit 2, not a
// stack trace. Real processes: a port held by another server on loopback, a database address where
// nothing listens. (Embedded leg only: nothing here depends on the test database.)
describe.runIf(!isPostgres)('friendly start-up failures', () => {
  it('a busy port', async () => {
    const holder = createServer();
    const port = await freePort();
    await new Promise<void>((r) => holder.listen(port, '127.0.0.1', () => r()));
    try {
      const dataDir = await mkdtemp(join(tmpdir(), 'botpay-busy-'));
      const run = await runCli(['serve'], { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1' });
      expect(run.code).toBe(2);
      const lines = run.stderr
        .trim()
        .split('\n')
        .filter((l) => !l.startsWith('{'));
      expect(lines.at(-1)).toMatch(new RegExp(`Port ${port} .*already in use`));
      expect(run.stderr).not.toMatch(/\n\s+at /);
    } finally {
      await new Promise<void>((r) => holder.close(() => r()));
    }
  }, 60_000);

  it('a database that cannot be reached', async () => {
    const port = await freePort();
    const run = await runCli(['migrate'], {
      DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/none`,
      SECRET_KEY: 'startup-test-secret-key-0123456789abcdef',
    });
    expect(run.code).toBe(2);
    expect(run.stderr.trim()).toMatch(/^Cannot reach the database at DATABASE_URL \(ECONNREFUSED\)/m);
    expect(run.stderr).not.toMatch(/\n\s+at /);
  }, 60_000);
});
