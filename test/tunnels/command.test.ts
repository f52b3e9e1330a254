import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { chmod, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isValidWebhookPath, shellQuote, tunnelClientCommand } from '../../src/bots/tunnelSetup.ts';
import { bufferedStdout, LOG_FLUSH_MS } from '../../src/tunnels/cli.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  registerBot,
  type TestService,
} from '../support/service.ts';
import { hostRequest, listen, registerTunnelBot, startReceiver, until } from './helpers.ts';

// Issue 14 item 6: tunnel_client_command is one POSIX sh line with every word quoted, webhook_path
// accepts nothing a shell would interpret, and the token is never on the command line (ps shows a
// command line to every user of the machine): the client reads BOTPAY_TUNNEL_TOKEN or --token-file.

const HOSTILE_PATHS = [
  '/x;touch PWNED',
  '/$(touch PWNED)',
  '/`touch PWNED`',
  '/a|touch PWNED',
  '/a&touch PWNED',
  "/a'b",
  '/a"b',
  '/a b',
  '/a\\b',
  '/a>PWNED',
  '/a<b',
  '/a*',
  '/a?x=1',
  '/a!b',
  '/a#b',
  '/../admin',
  '/a/./b',
  '//evil.example.com',
  '/a\nb',
  '/a%zz',
  '/\u00e9',
];

/** Runs `command` with sh, `botpay` being a function that prints its arguments NUL-separated. */
function argvThroughSh(command: string, cwd: string): string[] {
  const out = execFileSync('sh', ['-c', `botpay() { printf '%s\\0' "$@"; }\n${command}`], { cwd });
  return out.toString('utf8').split('\0').slice(0, -1);
}

describe('tunnel_client_command and webhook_path', () => {
  let svc: TestService;
  let dir: string;

  beforeAll(async () => {
    svc = await createTestService({ env: { LOG_LEVEL: 'silent' } });
    dir = await mkdtemp(join(tmpdir(), 'botpay-cmd-'));
  });
  afterAll(async () => {
    await svc.close();
    await rm(dir, { recursive: true, force: true });
  });

  it.each(HOSTILE_PATHS)(
    'registration refuses webhook_path %j with 400 validation_error, nothing created',
    async (path) => {
      const before = (await svc.ctx.db.query<{ n: number }>('SELECT count(*)::int AS n FROM bots'))[0]!.n;
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bots/register',
        remoteAddress: `10.9.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}`,
        payload: { bot_name: `hostile-${Math.random()}`, owner_email: 'o@example.com', webhook_path: path },
      });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json()).toMatchObject({ error: 'validation_error', field: 'webhook_path' });
      const after = (await svc.ctx.db.query<{ n: number }>('SELECT count(*)::int AS n FROM bots'))[0]!.n;
      expect(after).toBe(before);
    },
  );

  it('ordinary paths are accepted, unquoted in the command', async () => {
    for (const path of ['/webhook', '/hooks/service', '/a-b_c.d/e~f/%41:@+,=', '/', '/trailing/']) {
      expect(isValidWebhookPath(path), path).toBe(true);
    }
    expect(tunnelClientCommand('https://pay.example.com', 18789, '/hooks/service', 'svc_tun_0a1b')).toBe(
      'BOTPAY_TUNNEL_TOKEN=svc_tun_0a1b botpay tunnel --server https://pay.example.com --port 18789 --path /hooks/service',
    );
  });

  it('the printed command passes the token in the environment, never as an argument', async () => {
    const bot = (await registerBot(svc, { callback_url: undefined, webhook_path: '/in' })) as Record<
      string,
      // biome-ignore lint/suspicious/noExplicitAny: a JSON answer
      any
    >;
    const command = bot.tunnel_setup.tunnel_client_command as string;
    expect(command).toBe(
      `BOTPAY_TUNNEL_TOKEN=${bot.tunnel_token} botpay tunnel --server http://localhost:8080 --port 18789 --path /in`,
    );
    // What the client process gets as arguments (what ps shows) holds no token.
    expect(argvThroughSh(command, dir)).toEqual([
      'tunnel',
      '--server',
      'http://localhost:8080',
      '--port',
      '18789',
      '--path',
      '/in',
    ]);
    expect((bot.tunnel_setup.steps as string[]).join('\n')).toMatch(/BOTPAY_TUNNEL_TOKEN/);

    // The owner's rotation prints the same kind of command.
    const owner = await createOwner(svc);
    const claimed = await activeBot(svc, owner, { body: { callback_url: undefined, webhook_path: '/in' } });
    const rotated = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${claimed.bot_id}/tunnel-token/rotate`,
      headers: owner.auth,
    });
    expect(rotated.statusCode).toBe(200);
    expect(rotated.json().tunnel_client_command).toBe(
      `BOTPAY_TUNNEL_TOKEN=${rotated.json().tunnel_token} botpay tunnel --server http://localhost:8080 --port 18789 --path /in`,
    );
    expect(rotated.json().note).toMatch(/BOTPAY_TUNNEL_TOKEN/);
  });

  it('through sh -c, hostile values stay single words and run nothing', async () => {
    const path = "/x';touch PWNED;'$(touch PWNED2)`touch PWNED3`|id&&touch PWNED4 \\ \n\"";
    expect(isValidWebhookPath(path)).toBe(false); // refused at registration; quoted anyway
    const command = tunnelClientCommand("http://h'o;st:1", 8080, path, "svc_tun_';touch PWNED5");
    expect(argvThroughSh(command, dir)).toEqual([
      'tunnel',
      '--server',
      "http://h'o;st:1",
      '--port',
      '8080',
      '--path',
      path,
    ]);
    expect(await readdir(dir)).toEqual([]);
  });

  it('shellQuote round-trips any string through sh (property)', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.string({ unit: 'binary', minLength: 0, maxLength: 40 }).filter((s) => !s.includes('\0')),
          { minLength: 1, maxLength: 6 },
        ),
        (words) => {
          const command = ['botpay', ...words].map(shellQuote).join(' ');
          expect(argvThroughSh(command, dir)).toEqual(words);
        },
      ),
      { numRuns: 30 },
    );
  }, 120_000);
});

describe("the client's log output", () => {
  it('lines are written together, in order, within LOG_FLUSH_MS (one write per batch, none lost)', async () => {
    const writes: string[] = [];
    const log = bufferedStdout((text) => writes.push(text));
    log('one');
    log('two');
    expect(writes).toEqual([]);
    await new Promise((r) => setTimeout(r, LOG_FLUSH_MS + 30));
    expect(writes).toEqual(['one\ntwo\n']);
    log('three');
    await new Promise((r) => setTimeout(r, LOG_FLUSH_MS + 30));
    expect(writes).toEqual(['one\ntwo\n', 'three\n']);
  });
});

describe('the printed command runs as printed, and the token stays out of ps', () => {
  let svc: TestService;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let port: number;
  let bin: string;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    receiver = await startReceiver();
    // BASE_URL is the listening address so that the printed --server works as printed.
    const { createServer } = await import('node:net');
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    port = (probe.address() as { port: number }).port;
    await new Promise<void>((r) => probe.close(() => r()));
    svc = await createTestService({ env: { BASE_URL: `http://127.0.0.1:${port}`, LOG_LEVEL: 'silent' } });
    await listen(svc, port);
    // `botpay` on PATH, as `npm install -g` would provide it.
    bin = await mkdtemp(join(tmpdir(), 'botpay-bin-'));
    await writeFile(
      join(bin, 'botpay'),
      `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(resolve('bin/botpay.mjs'))} "$@"\n`,
    );
    await chmod(join(bin, 'botpay'), 0o755);
  });
  afterAll(async () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
    await svc.close();
    await receiver.close();
    await rm(bin, { recursive: true, force: true });
  });

  /**
   * Runs `command` the way a person or a start script does: as a line of a shell script (typed
   * into a terminal it is the same). `sh -c "<command>"` would itself put the whole line, token
   * included, into ps; docs/tunnels.md says so.
   */
  let scripts = 0;
  function run(command: string, env: Record<string, string>) {
    const script = join(bin, `start-${++scripts}.sh`);
    writeFileSync(script, `${command}\n`, { mode: 0o700 });
    const child = spawn('sh', [script], {
      env: { ...process.env, PATH: `${bin}:${process.env.PATH}`, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    let out = '';
    child.stdout!.on('data', (c) => {
      out += String(c);
    });
    child.stderr!.on('data', (c) => {
      out += String(c);
    });
    const exit = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    /** SIGTERM to the client process itself (sh may or may not have exec'ed it); sh passes its status on. */
    const stop = () => {
      const table = execFileSync('ps', ['-e', '-o', 'pid=,ppid=,args=']).toString().trim().split('\n');
      const rows = table.map((l) => /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(l)!).filter(Boolean);
      const tree = new Set([child.pid]);
      for (let grew = true; grew; ) {
        grew = false;
        for (const [, pid, ppid] of rows) {
          if (tree.has(Number(ppid)) && !tree.has(Number(pid))) {
            tree.add(Number(pid));
            grew = true;
          }
        }
      }
      for (const [, pid, , args] of rows) {
        if (tree.has(Number(pid)) && args!.includes('botpay.mjs tunnel'))
          process.kill(Number(pid), 'SIGTERM');
      }
    };
    return { child, output: () => out, exit, stop };
  }

  it('tunnel_client_command as printed (a line of a start script) connects and relays; ps never shows the token', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    const command = (bot as unknown as { tunnel_setup: { tunnel_client_command: string } }).tunnel_setup
      .tunnel_client_command;
    const client = run(command, {});
    try {
      await until(() => client.output().includes('tunnel: connected'), 20_000);
      const res = await hostRequest(port, bot.hostname, {
        method: 'POST',
        path: bot.webhook_path,
        body: 'hi',
      });
      expect(res.status).toBe(200);
      expect(res.body.toString()).toBe('hi');
      const ps = execFileSync('ps', ['-eww', '-o', 'args=']).toString();
      expect(ps).toContain('bin/botpay.mjs tunnel --server');
      expect(ps).not.toContain(bot.tunnel_token);
      expect(client.output()).not.toContain(bot.tunnel_token);
      client.stop();
      expect(await client.exit).toBe(0);
    } finally {
      if (client.child.exitCode === null) client.child.kill('SIGKILL');
    }
  }, 120_000);

  it('--token-file works (and warns when others can read the file); --token works with a warning', async () => {
    const bot = await registerTunnelBot(svc, receiver.port);
    const dir = await mkdtemp(join(tmpdir(), 'botpay-token-'));
    try {
      const file = join(dir, 'token');
      await writeFile(file, `${bot.tunnel_token}\n`, { mode: 0o644 });
      await chmod(file, 0o644);
      const base = `botpay tunnel --server http://127.0.0.1:${port} --port ${receiver.port}`;
      const viaFile = run(`${base} --token-file ${shellQuote(file)}`, {});
      await until(() => viaFile.output().includes('tunnel: connected'), 20_000);
      expect(viaFile.output()).toMatch(/can be read by other users/);
      viaFile.stop();
      expect(await viaFile.exit).toBe(0);

      await chmod(file, 0o600);
      const quiet = run(`${base} --token-file ${shellQuote(file)}`, {});
      await until(() => quiet.output().includes('tunnel: connected'), 20_000);
      expect(quiet.output()).not.toMatch(/warning/);
      quiet.stop();
      expect(await quiet.exit).toBe(0);

      const viaArg = run(`${base} --token ${bot.tunnel_token}`, {});
      await until(() => viaArg.output().includes('tunnel: connected'), 20_000);
      expect(viaArg.output()).toMatch(/--token puts the token on the command line.*ps/);
      viaArg.stop();
      expect(await viaArg.exit).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('without a token the client exits 2 and says where to put it', async () => {
    const missing = run(`botpay tunnel --server http://127.0.0.1:${port} --port ${receiver.port}`, {
      BOTPAY_TUNNEL_TOKEN: '',
    });
    expect(await missing.exit).toBe(2);
    expect(missing.output()).toMatch(/BOTPAY_TUNNEL_TOKEN/);
    const unreadable = run(
      `botpay tunnel --server http://127.0.0.1:${port} --port ${receiver.port} --token-file /nonexistent/token`,
      {},
    );
    expect(await unreadable.exit).toBe(2);
    expect(unreadable.output()).toMatch(/--token-file \/nonexistent\/token cannot be read/);
  }, 120_000);
});
