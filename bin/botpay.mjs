#!/usr/bin/env node
// The package's command. It runs the compiled service (dist/, made by `npm install`; see
// bin/compiled.mjs) when that build is current, rebuilds it when a source changed since, and runs
// the TypeScript sources through tsx when no build can be had, so that `npm install && npm start`
// needs no build step and an edited source never runs stale. BOTPAY_TSX=1 always uses tsx.
import { readFileSync } from 'node:fs';
import { compiledEntry } from './compiled.mjs';

const compiled = process.env.BOTPAY_TSX === '1' ? { fallback: 'BOTPAY_TSX=1' } : await compiledEntry();
let main;
if ('entry' in compiled) {
  // Stack traces name src/ files and lines (the bundle's source maps).
  process.setSourceMapsEnabled(true);
  ({ main } = await import(compiled.entry));
} else {
  if (process.env.BOTPAY_TSX !== '1')
    process.stderr.write(`botpay: running the TypeScript sources through tsx (${compiled.fallback})\n`);
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import('../src/cli.ts'));
}
const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
await main(process.argv.slice(2), { runtime: 'entry' in compiled ? 'compiled' : 'tsx', version });
