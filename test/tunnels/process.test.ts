import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionFor, createTestDatabase, isPostgres, type TestDatabase } from '../support/db.ts';
import { freePort } from '../support/process.ts';
import { TEST_SECRET_KEY } from '../support/service.ts';
import { hostRequest, startClient, startReceiver, until } from './helpers.ts';

// The real service process (`botpay serve` on PostgreSQL) killed with SIGKILL mid-flight and started
// again on the same port: the tunnel client notices, reconnects with backoff and traffic resumes.
describe.runIf(isPostgres)('tunnel client against a real service process', () => {
  let database: TestDatabase;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    database = await createTestDatabase();
    receiver = await startReceiver();
  });
  afterAll(async () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
    await receiver.close();
    await database.drop();
  });

  async function serve(port: number): Promise<ChildProcess> {
    const child = spawn(process.execPath, ['bin/botpay.mjs', 'serve'], {
      env: {
        ...process.env,
        DATABASE_URL: connectionFor(database.schema!),
        SECRET_KEY: TEST_SECRET_KEY,
        PORT: String(port),
        HOST: '127.0.0.1',
        BASE_URL: `http://127.0.0.1:${port}`,
        ALLOW_PRIVATE_WEBHOOK_TARGETS: 'true',
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    children.push(child);
    await until(async () => {
      try {
        return (await fetch(`http://127.0.0.1:${port}/healthz`)).ok;
      } catch {
        return false;
      }
    }, 30_000);
    return child;
  }

  it('reconnects after the service is killed (SIGKILL) and restarted, and requests flow again', async () => {
    const port = await freePort();
    const first = await serve(port);
    const registration = await fetch(`http://127.0.0.1:${port}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        bot_name: 'tunnel-process',
        owner_email: 'owner@example.com',
        local_port: receiver.port,
      }),
    });
    expect(registration.status).toBe(201);
    const bot = (await registration.json()) as { webhook_url: string; tunnel_token: string };
    const hostname = new URL(bot.webhook_url).hostname;
    const { client, lines } = startClient({
      server: `http://127.0.0.1:${port}`,
      token: bot.tunnel_token,
      port: receiver.port,
      heartbeatMs: 1_000,
    });
    try {
      await client.waitConnected();
      expect((await hostRequest(port, hostname, { method: 'POST', path: '/hooks/service' })).status).toBe(
        200,
      );

      first.kill('SIGKILL');
      await until(() => !client.connected, 10_000);
      await serve(port);
      await until(() => client.connections >= 2, 20_000);
      const res = await hostRequest(port, hostname, {
        method: 'POST',
        path: '/hooks/service',
        body: 'resumed',
      });
      expect(res.status).toBe(200);
      expect(res.body.toString()).toBe('resumed');
      expect(lines.some((l) => l.includes('reconnecting in'))).toBe(true);
    } finally {
      await client.stop();
    }
  });
});
