import { spawn } from 'node:child_process';
import { mkdtemp, open, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isPostgres } from '../support/db.ts';
import { childEnv, freePort } from '../support/process.ts';

// What `npm start` prints, as one terminal shows it (stdout and stderr into one file, so the order
// is the order of the writes): the human lines first — the dashboard's address and where sign-in
// links appear —, then the JSON log. In development (BASE_URL on localhost) requests are logged at
// debug, so the sign-in links are not buried under two JSON lines per request; with a public
// BASE_URL they stay at info (the access log an operator ships). Issue 35, item 4.
describe.runIf(!isPostgres)('the human lines of botpay serve', () => {
  async function serve(env: Record<string, string>) {
    const dir = await mkdtemp(join(tmpdir(), 'botpay-lines-'));
    const port = await freePort();
    const file = join(dir, 'terminal.txt');
    const terminal = await open(file, 'w');
    const child = spawn(process.execPath, ['bin/botpay.mjs', 'serve'], {
      env: childEnv({
        PORT: String(port),
        HOST: '127.0.0.1',
        DATA_DIR: join(dir, 'data'),
        LOG_LEVEL: 'info',
        ...env,
      }),
      stdio: ['ignore', terminal.fd, terminal.fd],
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    try {
      let ready = false;
      for (let i = 0; i < 400 && !ready && child.exitCode === null; i++) {
        ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
          (r) => r.status === 200,
          () => false,
        );
        if (!ready) await new Promise((r) => setTimeout(r, 150));
      }
      expect(ready, await readFile(file, 'utf8')).toBe(true);
      for (const path of ['/healthz', '/api/v1/bot/status', '/signin'])
        await fetch(`http://127.0.0.1:${port}${path}`);
      // The request lines of those requests (when logged) are written before the answer is sent.
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      child.kill('SIGTERM');
      await exited;
      await terminal.close();
    }
    const lines = (await readFile(file, 'utf8')).split('\n').filter(Boolean);
    await rm(dir, { recursive: true, force: true });
    return { lines, port };
  }

  it('development: the dashboard address first, then JSON; no request lines at info', async () => {
    const { lines, port } = await serve({});
    expect(lines[0]).toBe(`Dashboard: http://localhost:${port}`);
    expect(lines[1]).toBe('SMTP_URL is not set: sign-in links are printed here instead of being mailed.');
    const json = lines.slice(2).map((l) => JSON.parse(l) as { msg: string });
    expect(json.map((l) => l.msg)).toContain('service started');
    expect(json.filter((l) => l.msg === 'incoming request' || l.msg === 'request completed')).toEqual([]);
  }, 120_000);

  it('a public BASE_URL keeps the request lines at info', async () => {
    const { lines } = await serve({
      BASE_URL: 'https://pay.example.com',
      SECRET_KEY: 'human-lines-test-secret-key-0123456789abcdef',
    });
    expect(lines[0]).toBe('Dashboard: https://pay.example.com');
    const messages = lines
      .filter((l) => l.startsWith('{'))
      .map((l) => (JSON.parse(l) as { msg: string }).msg);
    expect(messages.filter((m) => m === 'request completed').length).toBeGreaterThanOrEqual(3);
  }, 120_000);
});
