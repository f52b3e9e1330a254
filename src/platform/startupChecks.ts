import { constants } from 'node:fs';
import { access, mkdir, stat } from 'node:fs/promises';
import { createServer } from 'node:net';
import { dirname } from 'node:path';
import { ConfigError } from '../config.ts';

// Checks that a start-up failure is found before anything slow runs (opening the database,
// migrations), and said in one line naming the variable to change: issue 35, item 6. Each throws
// ConfigError, which the command line prints as one line with exit code 2 (src/cli.ts).

/**
 * Makes sure DATA_DIR is a directory this process can write, creating it (and its parents) when
 * missing. Node's own `mkdir(…, { recursive: true })` never returns for a path under /proc (it
 * retries the parent forever), and a DATA_DIR that is a file made it throw a raw EEXIST: both are
 * judged here, one level at a time.
 */
export async function ensureDataDir(dir: string): Promise<void> {
  const missing: string[] = [];
  let at = dir;
  for (;;) {
    try {
      const found = await stat(at);
      if (!found.isDirectory()) {
        throw new ConfigError(
          'DATA_DIR',
          at === dir
            ? `is ${dir}, which is a file, not a directory: set DATA_DIR to a directory (it is created when missing).`
            : `is ${dir}, but ${at} is a file, not a directory: set DATA_DIR to a directory.`,
        );
      }
      break;
    } catch (error) {
      if (error instanceof ConfigError) throw error;
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR')
        throw new ConfigError('DATA_DIR', `is ${dir}, which cannot be read (${code}).`);
      missing.unshift(at);
      const parent = dirname(at);
      if (parent === at) break;
      at = parent;
    }
  }
  for (const level of missing) {
    try {
      await mkdir(level);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') continue;
      throw new ConfigError(
        'DATA_DIR',
        `is ${dir}, which cannot be created (${code} at ${level}): choose a directory this user can write.`,
      );
    }
  }
  try {
    await access(dir, constants.W_OK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new ConfigError('DATA_DIR', `is ${dir}, which this user cannot write (${code}).`);
  }
}

/**
 * Binds HOST:PORT for a moment and lets it go, so that a busy port or an address that is not this
 * machine's is said at once, naming PORT or HOST, instead of after the database started (or blamed
 * on DATABASE_URL, as a failed address lookup was).
 */
export async function checkListenAddress(host: string, port: number): Promise<void> {
  if (port === 0) return;
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => resolve());
  }).then(
    () => new Promise<void>((resolve) => server.close(() => resolve())),
    (error: NodeJS.ErrnoException) => {
      throw listenError(error, host, port);
    },
  );
}

function listenError(error: NodeJS.ErrnoException, host: string, port: number): Error {
  switch (error.code) {
    case 'EADDRINUSE':
      return new ConfigError(
        'PORT',
        `is ${port}, which is already in use on ${host}: stop the other program or set PORT to a free port.`,
      );
    case 'EACCES':
      return new ConfigError(
        'PORT',
        `is ${port}, which this user may not listen on: choose a port above 1023.`,
      );
    case 'EADDRNOTAVAIL':
      return new ConfigError(
        'HOST',
        `is ${host}, which is not an address of this machine: use 0.0.0.0 (every address), 127.0.0.1 or one of its own addresses.`,
      );
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_FAIL':
    case 'EAI_NONAME':
      return new ConfigError(
        'HOST',
        `is ${host}, which is not an address this machine can listen on (${error.code}): use 0.0.0.0, 127.0.0.1 or one of its own addresses.`,
      );
    default:
      return new ConfigError(
        'HOST',
        `is ${host} and PORT ${port}: listening there failed (${error.code ?? error.message}).`,
      );
  }
}
