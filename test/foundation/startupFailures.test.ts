import { createServer } from 'node:net';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isPostgres } from '../support/db.ts';
import { freePort, runCli, startServiceProcess } from '../support/process.ts';

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
      expect(lines.at(-1)).toMatch(new RegExp(`PORT is ${port}, which is already in use`));
      expect(run.stderr).not.toMatch(/\n\s+at /);
      // Said before the database started (it used to come after ~17 s of it): nothing was made.
      expect(await readdir(dataDir)).toEqual([]);
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
  /** `botpay serve` with the environment given: one line on stderr, exit 2, nothing else done. */
  async function refused(env: Record<string, string>) {
    const dataDir = env.DATA_DIR ?? (await mkdtemp(join(tmpdir(), 'botpay-refused-')));
    const port = await freePort();
    const run = await runCli(['serve'], { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', ...env });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stdout).toBe('');
    const lines = run.stderr.trim().split('\n');
    expect(lines, run.stderr).toHaveLength(1);
    expect(run.stderr).not.toMatch(/\n\s+at /);
    if (!env.DATA_DIR) expect(await readdir(dataDir), 'the database was not started').toEqual([]);
    return lines[0] as string;
  }

  it('HOST that is not an IPv4 address is named, not blamed on DATABASE_URL', async () => {
    const line = await refused({ HOST: '256.1.1.1' });
    expect(line).toMatch(/^Invalid configuration: HOST is 256\.1\.1\.1, which is not an IPv4 address/);
    expect(line).not.toContain('DATABASE_URL');
  }, 60_000);

  it('HOST that is not an address of this machine', async () => {
    // 192.0.2.1 is reserved for documentation (RFC 5737): never a local address.
    const line = await refused({ HOST: '192.0.2.1' });
    expect(line).toMatch(
      /^Invalid configuration: HOST is 192\.0\.2\.1, which is not an address of this machine/,
    );
  }, 60_000);

  it('DATA_DIR that is a file, or below a file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'botpay-file-'));
    const file = join(dir, 'README.md');
    await writeFile(file, 'not a directory\n');
    expect(await refused({ DATA_DIR: file })).toBe(
      `Invalid configuration: DATA_DIR is ${file}, which is a file, not a directory: set DATA_DIR to a directory (it is created when missing).`,
    );
    expect(await refused({ DATA_DIR: join(file, 'data') })).toMatch(
      new RegExp(`^Invalid configuration: DATA_DIR is .*, but ${file.replaceAll('.', '\\.')} is a file`),
    );
  }, 60_000);

  // `botpay serve` opens the database while the service's modules load (src/cli.ts), before the
  // stored secrets are checked: a refusal after that must close it, or its thread keeps the process
  // (startService closes it on its own refusals; the CLI on any other failure after the opening).
  it('a SECRET_KEY that decrypts none of the stored secrets: one line, and the process ends', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'botpay-key-'));
    const first = await startServiceProcess({ DATA_DIR: dataDir });
    try {
      const res = await fetch(`${first.url}/api/v1/bots/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ bot_name: 'keyed', owner_email: 'owner@example.com' }),
      });
      expect(res.status).toBe(201);
    } finally {
      first.child.kill('SIGTERM');
      await first.exited;
    }
    expect(
      await refused({ DATA_DIR: dataDir, SECRET_KEY: 'another-secret-key-0123456789abcdef0123' }),
    ).toMatch(/SECRET_KEY.*does not decrypt the secrets stored in this database/);
  }, 60_000);

  // Node's mkdir(…, { recursive: true }) never returns for a path under /proc: the service hung
  // there with no output.
  it.runIf(existsSync('/proc/self'))(
    'DATA_DIR that cannot be created (under /proc) ends at once',
    async () => {
      expect(await refused({ DATA_DIR: '/proc/nope' })).toMatch(
        /^Invalid configuration: DATA_DIR is \/proc\/nope, which cannot be created \(ENOENT at \/proc\/nope\)/,
      );
    },
    60_000,
  );
});
