// The service's compiled JavaScript: src/cli.ts and what it imports, bundled by esbuild into
// dist/app-<id>/ (ES modules; the lazily loaded commands and the service are chunks of their own,
// so `botpay card split` does not load the service). Importing the bundle instead of compiling
// every TypeScript file through tsx on each start saves seconds and ~100 MB at start-up.
//
// Built by `npm install` (the postinstall step runs bin/build.mjs) and by the Dockerfile. A build
// is never trusted blindly: dist/manifest.json records every source file that went into it with
// its size and modification time, and bin/botpay.mjs compares them with the files on disk before
// each start (a few milliseconds). A source edited since, added to the import graph or removed
// makes the build stale: it is rebuilt (about a second), and if that fails (no esbuild, a
// read-only directory, a syntax error) the sources run through tsx as before, with a one-line
// notice. Packages stay external (loaded from node_modules as usual), so only our sources count.
//
// `import.meta.url` in a bundled source is rewritten to that source file's own URL (relative to
// the bundle, so the tree may move), so files read beside the sources (migrations, docs/skill.md,
// the dashboard's assets) are found as under tsx. Source maps point stack traces at src/.
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** Bumped whenever the build options below change, so that older builds count as stale. */
const FORMAT = 1;
const ENTRY = 'src/cli.ts';
/**
 * Worker threads' entries, bundled beside the service (their file names in the build directory):
 * the embedded database's thread (src/platform/db/pgliteThread.ts finds it next to its own chunk).
 */
const WORKERS = { 'pglite-worker': 'src/platform/db/pgliteWorker.ts' };
/** Build directories older than this that the manifest no longer names are removed. */
const KEEP_OLD_MS = 10 * 60_000;

export const DEFAULT_ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * Where builds go: <root>/dist, or BOTPAY_DIST_DIR (for tests; it must lie inside the project, as
 * the bundle imports its packages from the project's node_modules).
 * @param {string} root
 * @param {string | undefined} distDir
 */
function distOf(root, distDir) {
  return resolve(distDir ?? process.env.BOTPAY_DIST_DIR ?? join(resolve(root), 'dist'));
}

/**
 * The current build if every source it was made from is unchanged: `{ entry }` (a file URL to
 * import), else `{ stale }` saying why.
 * @param {{ root?: string, distDir?: string }} [options]
 * @returns {{ entry: string } | { stale: string }}
 */
export function checkBuild(options = {}) {
  const root = resolve(options.root ?? DEFAULT_ROOT);
  const dist = distOf(root, options.distDir);
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(join(dist, 'manifest.json'), 'utf8'));
  } catch {
    return { stale: 'no build yet' };
  }
  if (manifest?.format !== FORMAT || typeof manifest.dir !== 'string' || !manifest.inputs)
    return { stale: 'built by another version of the build step' };
  for (const [file, [size, mtimeMs]] of Object.entries(manifest.inputs)) {
    let s;
    try {
      s = statSync(join(root, file));
    } catch {
      return { stale: `${file} was removed` };
    }
    if (s.size !== size || s.mtimeMs !== mtimeMs) return { stale: `${file} changed` };
  }
  const entry = join(dist, manifest.dir, manifest.entry);
  if (!existsSync(entry)) return { stale: 'build output missing' };
  return { entry: pathToFileURL(entry).href };
}

/**
 * Bundles the sources into a new build directory and points dist/manifest.json at it (both
 * atomically: processes starting at the same time each use a complete build). Throws on failure.
 * @param {{ root?: string, distDir?: string }} [options]
 * @returns {Promise<{ entry: string, seconds: number }>}
 */
export async function build(options = {}) {
  const started = performance.now();
  const root = resolve(options.root ?? DEFAULT_ROOT);
  const dist = distOf(root, options.distDir);
  const esbuild = await import('esbuild');
  const id = `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  const dir = `app-${id}`;
  const tmp = join(dist, `.tmp-${id}`);
  await mkdir(tmp, { recursive: true });
  try {
    // Statted before bundling: an edit made while esbuild runs then shows as stale next time.
    const result = await esbuild.build({
      absWorkingDir: root,
      entryPoints: {
        cli: join(root, ENTRY),
        // (A project without one, as in test/foundation/compiledStart.test.ts, builds without it.)
        ...Object.fromEntries(
          Object.entries(WORKERS)
            .filter(([, file]) => existsSync(join(root, file)))
            .map(([name, file]) => [name, join(root, file)]),
        ),
      },
      outdir: tmp,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      packages: 'external',
      sourcemap: 'linked',
      sourcesContent: false,
      metafile: true,
      logLevel: 'silent',
      plugins: [importMetaUrl(root, join(dist, dir))],
    });
    const inputs = {};
    // This file too: a change to how the bundle is made makes older bundles stale.
    const builder = fileURLToPath(import.meta.url);
    for (const file of [...Object.keys(result.metafile.inputs), builder].sort()) {
      const abs = resolve(root, file);
      const rel = relative(root, abs).split(sep).join('/');
      const s = await stat(abs);
      inputs[rel] = [s.size, s.mtimeMs];
    }
    await rename(tmp, join(dist, dir));
    const manifest = { format: FORMAT, dir, entry: 'cli.js', builtAt: new Date().toISOString(), inputs };
    const manifestTmp = join(dist, `.manifest-${id}.json`);
    await writeFile(manifestTmp, `${JSON.stringify(manifest, null, 1)}\n`);
    await rename(manifestTmp, join(dist, 'manifest.json'));
  } catch (error) {
    await rm(tmp, { recursive: true, force: true });
    throw error;
  }
  await removeOldBuilds(dist, dir);
  return {
    entry: pathToFileURL(join(dist, dir, 'cli.js')).href,
    seconds: (performance.now() - started) / 1000,
  };
}

/**
 * The build to run: the current one, else a fresh one; `{ fallback }` (why) when neither can be
 * had and the sources must run through tsx.
 * @param {{ root?: string, distDir?: string }} [options]
 * @returns {Promise<{ entry: string, rebuilt?: string } | { fallback: string }>}
 */
export async function compiledEntry(options = {}) {
  const current = checkBuild(options);
  if ('entry' in current) return current;
  try {
    const { entry } = await build(options);
    return { entry, rebuilt: current.stale };
  } catch (error) {
    return { fallback: `${current.stale}; rebuilding failed: ${firstLine(error)}` };
  }
}

/** @param {unknown} error */
export function firstLine(error) {
  const text =
    error && typeof error === 'object' && 'errors' in error && Array.isArray(error.errors) && error.errors[0]
      ? `${error.errors[0].location?.file ?? ''}${error.errors[0].location ? `:${error.errors[0].location.line}: ` : ''}${error.errors[0].text}`
      : error instanceof Error
        ? error.message
        : String(error);
  return text.split('\n')[0];
}

/**
 * esbuild plugin: in our own sources (not packages from node_modules), `import.meta.url` becomes the URL of the source file itself,
 * computed relative to the bundle's location at run time.
 * @param {string} root
 * @param {string} outdir where the bundle will live (chunks are written flat into it)
 */
function importMetaUrl(root, outdir) {
  const own = (file) => file.startsWith(root + sep) && !file.includes(`${sep}node_modules${sep}`);
  return {
    name: 'import-meta-url',
    setup(b) {
      b.onLoad({ filter: /\.[cm]?ts$/ }, async (args) => {
        if (!own(args.path)) return undefined;
        const text = await readFile(args.path, 'utf8');
        if (!text.includes('import.meta.url')) return undefined;
        const rel = relative(outdir, args.path).split(sep).join('/');
        return {
          contents: text.replaceAll(
            'import.meta.url',
            `new URL(${JSON.stringify(rel)}, import.meta.url).href`,
          ),
          loader: 'ts',
          resolveDir: dirname(args.path),
        };
      });
    },
  };
}

/**
 * @param {string} dist
 * @param {string} keep
 */
async function removeOldBuilds(dist, keep) {
  const now = Date.now();
  for (const name of readdirSync(dist)) {
    if (
      name === keep ||
      !(name.startsWith('app-') || name.startsWith('.tmp-') || name.startsWith('.manifest-'))
    )
      continue;
    try {
      // Another process may have just built it and be importing it: only old ones go.
      if (now - statSync(join(dist, name)).mtimeMs > KEEP_OLD_MS)
        await rm(join(dist, name), { recursive: true, force: true });
    } catch {
      // removed meanwhile
    }
  }
}
