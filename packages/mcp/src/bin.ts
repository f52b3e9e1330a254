#!/usr/bin/env node
import { runStdio } from './stdio.ts';

// The package's bin, botpay-mcp: `npx @botpay/mcp` with BOTPAY_API_KEY (and BOTPAY_URL) set.
runStdio('botpay-mcp', process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  },
);
