import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { freePort } from '../support/process.ts';
import { createTestService } from '../support/service.ts';
import { hostRequest, listen, registerTunnelBot, startClient, startReceiver, until } from './helpers.ts';

function runCli(
  args: string[],
  env: Record<string, string> = {},
): { child: ChildProcess; output: () => string; exit: Promise<number | null> } {
  const child = spawn(process.execPath, ['bin/botpay.mjs', ...args], {
    cwd: process.cwd(),
    env: { ...process.env, BOTPAY_TUNNEL_TOKEN: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (c) => {
    out += String(c);
  });
  child.stderr!.on('data', (c) => {
    out += String(c);
  });
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => out, exit };
}

describe('tunnel client across service restarts and as a command', () => {
  let database: TestDatabase;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    database = await createTestDatabase();
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await receiver.close();
    await database.drop();
  });

  it('reconnects after the service restarts (same port, same database) and requests flow again', async () => {
    const first = await createTestService({ database });
    const port = await listen(first);
    const bot = await registerTunnelBot(first, receiver.port);
    const { client, lines } = startClient({
      server: `http://127.0.0.1:${port}`,
      token: bot.tunnel_token,
      port: receiver.port,
    });
    try {
      await client.waitConnected();
      expect((await hostRequest(port, bot.hostname, { path: '/before' })).status).toBe(200);

      await first.close(); // the app only; the database stays
      await until(() => lines.some((l) => l.includes('reconnecting in')));
      expect(client.connected).toBe(false);
      // Let a few reconnection attempts fail against the closed port.
      await new Promise((r) => setTimeout(r, 300));

      const second = await createTestService({ database });
      try {
        await listen(second, port);
        await until(() => client.connections >= 2, 10_000);
        const res = await hostRequest(port, bot.hostname, { method: 'POST', path: '/after', body: 'again' });
        expect(res.status).toBe(200);
        expect(res.body.toString()).toBe('again');
        expect(lines.some((l) => /ECONNREFUSED/.test(l))).toBe(true);
      } finally {
        await client.stop();
        await second.close();
      }
    } finally {
      await client.stop();
    }
  });

  it('`botpay tunnel` runs as printed in tunnel_client_command and exits 0 on SIGTERM', async () => {
    const port = await freePort();
    const svc = await createTestService({ database, env: { BASE_URL: `http://127.0.0.1:${port}` } });
    try {
      await listen(svc, port);
      const bot = (await registerTunnelBot(svc, receiver.port)) as unknown as {
        tunnel_setup: { tunnel_client_command: string };
        hostname: string;
      };
      // BOTPAY_TUNNEL_TOKEN=<token> botpay tunnel …: the assignment becomes the client's environment.
      const [assignment, cli, ...args] = bot.tunnel_setup.tunnel_client_command.split(' ');
      expect(cli).toBe('botpay');
      expect(assignment).toBe(
        `BOTPAY_TUNNEL_TOKEN=${(bot as unknown as { tunnel_token: string }).tunnel_token}`,
      );
      const run = runCli(args, { BOTPAY_TUNNEL_TOKEN: assignment!.split('=')[1]! });
      await until(() => run.output().includes('tunnel: connected'), 20_000);
      const res = await hostRequest(port, bot.hostname, {
        method: 'POST',
        path: '/hooks/service',
        body: 'cli',
      });
      expect(res.status).toBe(200);
      expect(res.body.toString()).toBe('cli');
      await until(() => run.output().includes('POST /hooks/service → 200'));
      run.child.kill('SIGTERM');
      expect(await run.exit).toBe(0);
      // The token never appears in the client's output.
      expect(run.output()).not.toContain((bot as unknown as { tunnel_token: string }).tunnel_token);
    } finally {
      await svc.close();
    }
  });

  it('`botpay tunnel` exits non-zero with a clear message when the token is rejected or arguments are wrong', async () => {
    const svc = await createTestService({ database });
    try {
      const port = await listen(svc);
      const rejected = runCli([
        'tunnel',
        '--server',
        `http://127.0.0.1:${port}`,
        '--token',
        `svc_tun_${'a'.repeat(48)}`,
        '--port',
        String(receiver.port),
      ]);
      expect(await rejected.exit).toBe(3);
      expect(rejected.output()).toContain('The service rejected the tunnel token (HTTP 401)');
      const usage = runCli(['tunnel', '--server', 'ftp://x', '--port', '99999']);
      expect(await usage.exit).toBe(2);
      expect(usage.output()).toContain('the tunnel token is missing: set BOTPAY_TUNNEL_TOKEN');
      expect(usage.output()).toContain('--port must be a port number');
    } finally {
      await svc.close();
    }
  });
});
