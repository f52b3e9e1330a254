import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { migrate } from './migrate.ts';
import { openPglite } from './pglite.ts';

// A fresh embedded database starts from a template: a PGlite data directory after initdb and every
// migration, dumped once (PGlite dumpDataDir) when the package is installed (`npm install` runs
// bin/prepare-embedded.mjs after its own postinstall step) and loaded into each new DATA_DIR
// (loadDataDir). PGlite's initdb costs seconds on every first start otherwise. The template holds
// no secrets (no migration writes any); it is per installation and per PGlite version (the file
// name carries it, so an upgraded PGlite never loads an older one's directory). Migrations added
// after the template was made are applied at start as usual. Start-up only reads it: the
// application directory may be read-only.

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

function pgliteVersion(): string {
  const require = createRequire(import.meta.url);
  // The package's exports hide package.json: walk up from its entry point.
  let dir = dirname(require.resolve('@electric-sql/pglite'));
  for (let i = 0; i < 4; i++) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === '@electric-sql/pglite' && pkg.version) return pkg.version;
    }
    dir = dirname(dir);
  }
  return 'unknown';
}

/** Where the template of this installation lives (under node_modules/.cache, like other tools' caches). */
export function templateFile(): string {
  return join(ROOT, 'node_modules', '.cache', 'botpay', `pglite-${pgliteVersion()}-template.tar.gz`);
}

/** The template, or undefined when none was made (installs that skipped it start with initdb). */
export async function readTemplate(file = templateFile()): Promise<Blob | undefined> {
  try {
    return new Blob([await readFile(file)]);
  } catch {
    return undefined;
  }
}

/** Makes the template: initdb in memory, every migration, dump; written atomically. */
export async function buildTemplate(file = templateFile()): Promise<string> {
  const db = await openPglite({});
  try {
    await migrate(db);
    const dump = await db.raw.dumpDataDir('gzip');
    await mkdir(dirname(file), { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    await writeFile(tmp, Buffer.from(await dump.arrayBuffer()));
    await rename(tmp, file);
    return file;
  } finally {
    await db.close();
  }
}
