// Regenerates src/generated.ts from the OpenAPI document of the service as built from src/.
//   npm run generate -w packages/client
//   node bin/run-ts.mjs packages/client/scripts/generate-types.ts
// The app is built exactly as production builds it (startService with an in-memory PGlite, no
// listening, no background jobs); only its OpenAPI document is read.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parseConfig } from '../../../src/config.ts';
import { openPglite } from '../../../src/platform/db/pglite.ts';
import { startService } from '../../../src/server.ts';
import { renderBotTypes } from './openapiToTs.ts';

const here = dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = resolve(here, '../../..');
export const GENERATED_FILE = join(REPO_ROOT, 'packages/client/src/generated.ts');

/** The OpenAPI document of a freshly built app. */
export async function loadOpenApi(): Promise<Record<string, unknown>> {
  const config = parseConfig({
    BASE_URL: 'http://localhost:8080',
    SECRET_KEY: randomBytes(32).toString('hex'),
    LOG_LEVEL: 'error',
  });
  const sink = new Writable({ write: (_chunk, _enc, done) => done() });
  const service = await startService(config, {
    db: await openPglite({}),
    listen: false,
    jobs: [],
    logStream: sink,
  });
  try {
    await service.app.ready();
    return service.app.swagger() as unknown as Record<string, unknown>;
  } finally {
    await service.close();
  }
}

/** The file's text for a document: rendered, then formatted by the repository's Biome setup. */
export function generatedSource(doc: Record<string, unknown>): string {
  const text = renderBotTypes(doc);
  const biome = join(REPO_ROOT, 'node_modules/.bin/biome');
  const formatted = spawnSync(biome, ['format', `--stdin-file-path=${relative(REPO_ROOT, GENERATED_FILE)}`], {
    cwd: REPO_ROOT,
    input: text,
    encoding: 'utf8',
  });
  if (formatted.status !== 0) throw new Error(`biome format failed: ${formatted.stderr}`);
  return formatted.stdout;
}

// Run as a script (directly or through bin/run-ts.mjs), not when a test imports it.
if (process.argv.slice(1, 3).some((arg) => resolve(arg) === fileURLToPath(import.meta.url))) {
  const source = generatedSource(await loadOpenApi());
  await writeFile(GENERATED_FILE, source);
  console.log(`wrote ${relative(process.cwd(), GENERATED_FILE)}`);
}
