#!/usr/bin/env node
// Runs a TypeScript file (benchmarks, scripts) with tsx: `node bin/run-ts.mjs bench/status.ts`.
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { register } from 'tsx/esm/api';

register();
const file = process.argv[2];
if (!file) {
  console.error('usage: run-ts <file.ts> [args...]');
  process.exit(2);
}
await import(pathToFileURL(resolve(file)).href);
