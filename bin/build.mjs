#!/usr/bin/env node
// Part of `npm install` (the root project's postinstall) and of the Dockerfile: compiles the
// service's TypeScript into dist/ (bin/compiled.mjs), so that `npm start` imports JavaScript
// instead of compiling every file through tsx on each start. Skipped when the sources are not
// there yet (the Dockerfile's dependency layer; it runs this again after copying src/), when
// installed as another project's dependency, or with BOTPAY_SKIP_BUILD=1. Never fails the install:
// without a build, `npm start` builds on first start or runs the sources through tsx.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const ownInstall =
  !process.env.INIT_CWD || fileURLToPath(new URL(`file://${process.env.INIT_CWD}/`)) === root;
if (
  process.env.BOTPAY_SKIP_BUILD === '1' ||
  !existsSync(new URL('../src/cli.ts', import.meta.url)) ||
  !ownInstall
)
  process.exit(0);
try {
  const { build } = await import('./compiled.mjs');
  const { seconds } = await build();
  console.log(`build: compiled the service into dist/ (${seconds.toFixed(1)} s)`);
} catch (error) {
  const { firstLine } = await import('./compiled.mjs');
  console.warn(`build: skipped (${firstLine(error)}); \`npm start\` runs the TypeScript sources through tsx`);
}
