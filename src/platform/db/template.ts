import { constants, existsSync, readFileSync } from 'node:fs';
import { chmod, copyFile, mkdir, readdir, rename, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { migrate } from './migrate.ts';

// A fresh embedded database starts from a template: a PGlite data directory after initdb and every
// migration, made once when the package is installed (`npm install` runs bin/prepare-embedded.mjs
// after its own postinstall step) and shut down cleanly. A new DATA_DIR gets a copy of that
// directory (a plain file copy, a reflink where the file system has them: ~0.1 s for its ~30 MB),
// so the first start opens it exactly like a restart: no initdb (seconds), no archive to unpack
// in memory, no recovery. The template holds no secrets (no migration writes any); it is per
// installation and per PGlite version (the directory name carries it, so an upgraded PGlite never
// opens an older one's directory). Migrations added after the template was made are applied at
// start as usual. Start-up only reads it: the application directory may be read-only.

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
export function templateDir(): string {
  return join(ROOT, 'node_modules', '.cache', 'botpay', `pglite-${pgliteVersion()}-template`);
}

/** A data directory is complete once PG_VERSION is in it (the template appears by rename, whole). */
export function isDataDir(dir: string): boolean {
  return existsSync(join(dir, 'PG_VERSION'));
}

/**
 * Makes pgDir a copy of the template; false (nothing done) when there is none, and the first start
 * then runs initdb. The copy is made beside pgDir and renamed into place, so a start interrupted
 * while copying leaves no half directory that a later start would take for a database.
 */
export async function copyTemplate(pgDir: string, template = templateDir()): Promise<boolean> {
  if (!isDataDir(template)) return false;
  const tmp = `${pgDir}.${process.pid}.tmp`;
  await rm(tmp, { recursive: true, force: true });
  try {
    await copyDataDir(template, tmp);
    await rm(pgDir, { recursive: true, force: true }); // an empty or half-made directory, never a database
    await rename(tmp, pgDir);
  } catch (error) {
    await rm(tmp, { recursive: true, force: true });
    throw error;
  }
  return true;
}

/** Makes the template: initdb, every migration, a clean shutdown; renamed into place when complete. */
export async function buildTemplate(dir = templateDir()): Promise<string> {
  const tmp = `${dir}.${process.pid}.tmp`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(dirname(dir), { recursive: true });
  try {
    // PGlite in this thread, loaded here only: the service's start copies the template and opens
    // the copy on the embedded database's own thread (pgliteThread.ts).
    const { openPglite } = await import('./pglite.ts');
    const db = await openPglite({ dataDir: tmp });
    try {
      await migrate(db);
    } finally {
      await db.close();
    }
    // Readable by the user the service runs as, which may not be the one installing (the
    // Dockerfile builds as root and runs as node). It holds no secrets.
    await setModes(tmp, 0o755, 0o644);
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
    // The archive earlier versions of this step made, which nothing reads any more.
    await rm(`${dir}.tar.gz`, { force: true });
  } catch (error) {
    await rm(tmp, { recursive: true, force: true });
    // Another install made it at the same time: theirs is as good.
    if (!isDataDir(dir)) throw error;
  }
  return dir;
}

async function setModes(root: string, dirMode: number, fileMode: number): Promise<void> {
  await chmod(root, dirMode);
  for (const entry of await readdir(root, { recursive: true, withFileTypes: true })) {
    const path = join(entry.parentPath, entry.name);
    if (entry.isDirectory()) await chmod(path, dirMode);
    else if (entry.isFile()) await chmod(path, fileMode);
  }
}

/**
 * Copies a data directory: its ~1,100 files at once (fs.cp copies one after another: three times
 * slower), reflinked where the file system can. The template is readable by all (made at install,
 * perhaps by another user); the copy is the service's own, with the modes PostgreSQL gives its
 * directories (0700) and files (0600).
 */
async function copyDataDir(from: string, to: string): Promise<void> {
  const entries = await readdir(from, { recursive: true, withFileTypes: true });
  await mkdir(to, { mode: 0o700 });
  const files: string[] = [];
  for (const entry of entries) {
    const rel = relative(from, join(entry.parentPath, entry.name));
    if (entry.isDirectory()) await mkdir(join(to, rel), { recursive: true, mode: 0o700 });
    else if (entry.isFile()) files.push(rel);
  }
  await Promise.all(
    files.map(async (rel) => {
      await copyFile(join(from, rel), join(to, rel), constants.COPYFILE_FICLONE);
      await chmod(join(to, rel), 0o600);
    }),
  );
}
