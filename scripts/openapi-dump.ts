// Writes the OpenAPI document exactly as the service serves it at /openapi.json (built from every
// registered route's schema) to a file, so that `redocly lint` checks the live document:
//   node bin/run-ts.mjs scripts/openapi-dump.ts test-artifacts/openapi.json
// No database is needed to build the document: the app is built on an in-memory embedded one.
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { buildApp } from '../src/app.ts';
import { parseConfig } from '../src/config.ts';
import { systemClock } from '../src/platform/clock.ts';
import { createSecretBox } from '../src/platform/crypto.ts';
import { openPglite } from '../src/platform/db/pglite.ts';
import { createLogger } from '../src/platform/logger.ts';
import type { Mailer } from '../src/platform/mailer.ts';
import { createMetrics } from '../src/platform/metrics.ts';

/** The served document of an app built with this configuration (BASE_URL names the server). */
export async function openapiDocument(baseUrl = 'https://pay.example.com'): Promise<unknown> {
  const secretKey = 'openapi-dump-0123456789abcdef0123456789abcdef';
  const config = parseConfig({ BASE_URL: baseUrl, SECRET_KEY: secretKey, LOG_LEVEL: 'silent' });
  const db = await openPglite({});
  const mailer: Mailer = { send: async () => {}, close: async () => {} };
  const app = await buildApp({
    config,
    db,
    clock: systemClock,
    secrets: createSecretBox(secretKey),
    mailer,
    logger: createLogger('silent'),
    metrics: createMetrics(db),
  });
  try {
    await app.ready();
    const res = await app.inject({ url: '/openapi.json' });
    if (res.statusCode !== 200) throw new Error(`/openapi.json answered ${res.statusCode}`);
    return res.json();
  } finally {
    await app.close();
    await db.close();
  }
}

// Run as a script (bin/run-ts.mjs passes the script's path, then its arguments); imported, nothing runs.
if (process.argv[1]?.endsWith('run-ts.mjs') && process.argv[2]?.endsWith('openapi-dump.ts')) {
  const out = process.argv[3];
  if (!out) {
    console.error('usage: node bin/run-ts.mjs scripts/openapi-dump.ts <output.json>');
    process.exit(2);
  }
  const doc = await openapiDocument();
  await mkdir(dirname(out), { recursive: true });
  await writeFile(out, `${JSON.stringify(doc, null, 2)}\n`);
  console.log(`wrote ${out}`);
}
