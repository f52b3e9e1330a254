import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { migrate } from '../../src/platform/db/migrate.ts';
import { openPglite } from '../../src/platform/db/pglite.ts';
import { loadNotice } from './load.ts';
import { skipNotice } from './skipped.ts';

// PGlite's initdb costs seconds and most of a gigabyte; do it once per run, migrate, and dump a
// template that every test file loads (about half a second).
export const TEMPLATE_DIR = join(process.cwd(), 'test-artifacts');
export const TEMPLATE_FILE = join(TEMPLATE_DIR, 'pglite-template.tar.gz');

export async function setup(): Promise<void> {
  for (const line of skipNotice()) console.log(line);
  const busy = loadNotice('start');
  if (busy) console.log(busy);
  await mkdir(TEMPLATE_DIR, { recursive: true });
  const db = await openPglite({});
  try {
    await migrate(db);
    const dump = await db.raw.dumpDataDir('gzip');
    await writeFile(TEMPLATE_FILE, Buffer.from(await dump.arrayBuffer()));
  } finally {
    await db.close();
  }
}

export function teardown(): void {
  const busy = loadNotice('end');
  if (busy) console.log(busy);
}
