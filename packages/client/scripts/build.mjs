// Builds the published package: dist/esm and dist/cjs from src/ with the TypeScript compiler.
//   npm run build -w packages/client     (npm pack runs it through prepack)
import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');

rmSync(join(root, 'dist'), { recursive: true, force: true });
for (const project of ['tsconfig.build.json', 'tsconfig.cjs.json']) {
  const run = spawnSync(process.execPath, [tsc, '-p', join(root, project)], { stdio: 'inherit' });
  if (run.status !== 0) process.exit(run.status ?? 1);
}
// tsc rewrites `./x.ts` to `./x.js` in the JavaScript it emits but not in declarations: do it there,
// so consumers' TypeScript resolves every relative import of the .d.ts files.
for (const entry of readdirSync(join(root, 'dist'), { recursive: true })) {
  const file = join(root, 'dist', String(entry));
  if (!file.endsWith('.d.ts')) continue;
  const text = readFileSync(file, 'utf8');
  const fixed = text.replace(/(from\s+|import\s*\(\s*)(['"])(\.{1,2}\/[^'"]+)\.ts\2/g, '$1$2$3.js$2');
  if (fixed !== text) writeFileSync(file, fixed);
}
// Inside dist/cjs the nearest package.json says commonjs, so .js there is CommonJS to Node and to
// TypeScript (the .d.ts files are read as CommonJS declarations).
writeFileSync(join(root, 'dist/cjs/package.json'), `${JSON.stringify({ type: 'commonjs' }, null, 2)}\n`);

// The README's links to the service's documentation point at copies shipped in the package
// (dist/docs/, from the repository's docs/), by their address on unpkg for this very version, so
// they work on npm's page and anywhere the README is read. Each linked file is copied; a link to
// another version or to a file the repository does not have fails the build.
const { name, version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const readme = readFileSync(join(root, 'README.md'), 'utf8');
const linked = [...readme.matchAll(/https:\/\/unpkg\.com\/([^)\s#]+)/g)].map((m) => m[1] ?? '');
const prefix = `${name}@${version}/`;
mkdirSync(join(root, 'dist/docs'), { recursive: true });
for (const target of new Set(linked)) {
  if (!target.startsWith(prefix)) {
    console.error(`README.md links ${target}: expected ${prefix}… (update the links with the version)`);
    process.exit(1);
  }
  const file = target.slice(prefix.length);
  const doc = /^dist\/docs\/([\w-]+\.md)$/.exec(file)?.[1];
  const source = doc ? join(root, '../../docs', doc) : undefined;
  if (!source || !existsSync(source)) {
    console.error(`README.md links ${file}, which the build does not ship (dist/docs/<a file of docs/>)`);
    process.exit(1);
  }
  copyFileSync(source, join(root, 'dist/docs', doc));
}
