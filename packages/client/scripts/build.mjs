// Builds the published package: dist/esm and dist/cjs from src/ with the TypeScript compiler.
//   npm run build -w packages/client     (npm pack runs it through prepack)
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
