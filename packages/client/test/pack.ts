import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, readdir, rmdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * `npm pack` of a workspace package into `into`; the tarball's path. Its prepack build empties the
 * package's dist/ first, so two test files packing the same package at once would pack each
 * other's half-built output: packs of one package directory wait for each other (a lock
 * directory in the temporary folder, named after the package's path).
 */
export async function packPackage(dir: string, into: string): Promise<string> {
  const lock = join(
    tmpdir(),
    `botpay-pack-${createHash('sha256').update(resolve(dir)).digest('hex').slice(0, 16)}.lock`,
  );
  const started = Date.now();
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      // A lock left by a killed run is not waited on for ever.
      if (Date.now() - started > 240_000)
        throw new Error(`${lock} held for 4 minutes: remove it if no test runs`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  try {
    const before = new Set(await readdir(into));
    await run('npm', ['pack', '--silent', '--pack-destination', into], { cwd: dir, timeout: 180_000 });
    const file = (await readdir(into)).find((f) => f.endsWith('.tgz') && !before.has(f));
    if (!file) throw new Error(`npm pack wrote no tarball in ${dir}`);
    return join(into, file);
  } finally {
    await rmdir(lock);
  }
}
