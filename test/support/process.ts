import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';

/** The parent's environment without what Vitest adds (it sets BASE_URL=/ for Vite). */
export function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const { BASE_URL: _vite, ...rest } = process.env;
  return { ...rest, LOG_LEVEL: 'warn', ...env };
}

/** A free TCP port on loopback. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

export interface ServiceProcess {
  child: ChildProcess;
  port: number;
  url: string;
  output(): string;
  /** Resolves with the exit code (or signal name). */
  exited: Promise<number | string>;
}

/** Starts `botpay serve` as a child process (a real service, as `npm start` runs it). */
export async function startServiceProcess(
  env: Record<string, string>,
  port?: number,
): Promise<ServiceProcess> {
  const p = port ?? (await freePort());
  const child = spawn(process.execPath, ['bin/botpay.mjs', 'serve'], {
    env: childEnv({ PORT: String(p), HOST: '127.0.0.1', ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (d) => {
    out += String(d);
  });
  child.stderr?.on('data', (d) => {
    out += String(d);
  });
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => resolve(code ?? signal ?? -1));
  });
  const url = `http://127.0.0.1:${p}`;
  const deadline = Date.now() + 60_000;
  let ready = false;
  while (Date.now() < deadline && child.exitCode === null) {
    try {
      const res = await fetch(`${url}/readyz`);
      if (res.status === 200) {
        ready = true;
        break;
      }
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 150));
  }
  if (!ready) {
    child.kill('SIGKILL');
    throw new Error(`service did not become ready:\n${out}`);
  }
  return { child, port: p, url, output: () => out, exited };
}

/** Runs the CLI to completion, with `stdin` as its standard input when given. */
export async function runCli(
  args: string[],
  env: Record<string, string>,
  stdin?: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/botpay.mjs', ...args], {
      env: childEnv(env),
      stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    if (stdin !== undefined) child.stdin?.end(stdin);
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d) => {
      stdout += String(d);
    });
    child.stderr?.on('data', (d) => {
      stderr += String(d);
    });
    child.once('exit', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}
