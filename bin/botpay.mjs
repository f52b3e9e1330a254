#!/usr/bin/env node
// The package's command. TypeScript sources run through tsx so that `npm install && npm start`
// needs no build step.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli.ts');
await main(process.argv.slice(2));
