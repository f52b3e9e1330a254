import { execFile, spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './process.ts';

// A throw-away PostgreSQL cluster of this test's own (initdb in a temporary directory, its own
// port, trust authentication on 127.0.0.1 only), for tests that must stop or restart PostgreSQL
// without disturbing the shared server other test files and engineers use. Needs root or
// passwordless sudo (to run the server binaries as the postgres user) and the PostgreSQL server
// package (initdb, pg_ctl under /usr/lib/postgresql/<version>/bin, and a postgres user).

const run = promisify(execFile);

export interface PrivatePostgres {
  port: number;
  dir: string;
  url: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  restart(): Promise<void>;
  destroy(): Promise<void>;
}

/** The bin directory of the newest installed PostgreSQL server, or a reason it cannot be used. */
export function privatePostgresAvailability(): { bin: string } | { reason: string } {
  if (process.platform !== 'linux') return { reason: 'needs Linux' };
  if (asPostgresPrefix() === undefined)
    return { reason: 'needs root or passwordless sudo (to run initdb/pg_ctl as the postgres user)' };
  if (spawnSync('id', ['-u', 'postgres']).status !== 0) return { reason: 'there is no postgres user' };
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return { reason: `${base} not found (install the PostgreSQL server package)` };
  const versions = readdirSync(base)
    .filter((v) => existsSync(join(base, v, 'bin', 'initdb')) && existsSync(join(base, v, 'bin', 'pg_ctl')))
    .sort((a, b) => Number(b) - Number(a));
  if (versions.length === 0) return { reason: `no initdb/pg_ctl under ${base}/<version>/bin` };
  return { bin: join(base, versions[0]!, 'bin') };
}

/** How to run a command as the postgres user: runuser as root, else passwordless sudo (CI runners). */
function asPostgresPrefix(): string[] | undefined {
  if (process.getuid?.() === 0) return ['runuser', '-u', 'postgres', '--'];
  if (spawnSync('sudo', ['-n', 'true']).status === 0) return ['sudo', '-n', '-u', 'postgres', '--'];
  return undefined;
}

/** Runs a command as root (directly, or through passwordless sudo). */
function asRoot(command: string, args: string[]) {
  return process.getuid?.() === 0
    ? run(command, args, { timeout: 60_000 })
    : run('sudo', ['-n', command, ...args], { timeout: 60_000 });
}

async function asPostgres(bin: string, tool: string, args: string[]): Promise<string> {
  const [command, ...prefix] = asPostgresPrefix()!;
  const { stdout, stderr } = await run(command!, [...prefix, join(bin, tool), ...args], { timeout: 60_000 });
  return stdout + stderr;
}

export async function startPrivatePostgres(bin: string): Promise<PrivatePostgres> {
  const dir = await mkdtemp(join(tmpdir(), 'botpay-pg-'));
  await asRoot('chown', ['postgres:postgres', dir]);
  const data = join(dir, 'data');
  await asPostgres(bin, 'initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  const port = await freePort();
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=100`;
  const ctl = (args: string[]) => asPostgres(bin, 'pg_ctl', ['-D', data, ...args]);
  const start = async () => {
    await ctl(['-o', options, '-l', join(dir, 'log'), '-w', '-t', '60', 'start']);
  };
  await start();
  let destroyed = false;
  return {
    port,
    dir,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    start,
    async stop() {
      await ctl(['-m', 'fast', '-w', '-t', '60', 'stop']);
    },
    async restart() {
      await ctl(['-o', options, '-l', join(dir, 'log'), '-m', 'fast', '-w', '-t', '60', 'restart']);
    },
    async destroy() {
      if (destroyed) return;
      destroyed = true;
      await ctl(['-m', 'immediate', '-w', 'stop']).catch(() => {});
      await asRoot('rm', ['-rf', '--', dir]);
    },
  };
}
