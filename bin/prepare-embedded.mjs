#!/usr/bin/env node
// Part of `npm install` (the root project's postinstall, after bin/lock-optional.mjs): makes the
// embedded database's template (src/platform/db/template.ts), so that the first `npm start`
// copies a migrated data directory instead of running PGlite's initdb (seconds). Works offline.
// Skipped when the sources are not there yet (the Dockerfile's dependency layer; it runs this
// again after copying src/), when installed as another project's dependency, or with
// BOTPAY_SKIP_TEMPLATE=1. Never fails the install: without a template the first start runs initdb.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const source = new URL('../src/platform/db/template.ts', import.meta.url);
const ownInstall =
  !process.env.INIT_CWD || fileURLToPath(new URL(`file://${process.env.INIT_CWD}/`)) === root;
if (process.env.BOTPAY_SKIP_TEMPLATE === '1' || !existsSync(source) || !ownInstall) process.exit(0);
try {
  const started = Date.now();
  const { register } = await import('tsx/esm/api');
  register();
  const { buildTemplate } = await import(source.href);
  const dir = await buildTemplate();
  console.log(
    `prepare-embedded: embedded database template ready (${dir}, ${((Date.now() - started) / 1000).toFixed(1)} s)`,
  );
} catch (error) {
  console.warn(
    `prepare-embedded: skipped (${error instanceof Error ? error.message : error}); the first start runs initdb`,
  );
}
