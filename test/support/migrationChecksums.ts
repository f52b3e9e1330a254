import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { MIGRATIONS_DIR, sha256 } from '../../src/platform/db/migrate.ts';

// The checked-in checksums of the migration files (src/migrations/checksums.json), which
// test/foundation/migrationChecksums.test.ts compares with the files: a migration that already ran
// somewhere must never change. After adding a migration, record it with
//   npm run migrations:checksums
// (it only adds the new files; a changed one still fails the test until --accept-changed is given).

export const CHECKSUMS_FILE = join(MIGRATIONS_DIR, 'checksums.json');

export async function currentChecksums(): Promise<Record<string, string>> {
  const files = (await readdir(MIGRATIONS_DIR)).filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f)).sort();
  const out: Record<string, string> = {};
  for (const f of files) out[f] = sha256(await readFile(join(MIGRATIONS_DIR, f), 'utf8'));
  return out;
}

export async function recordedChecksums(): Promise<Record<string, string>> {
  return (JSON.parse(await readFile(CHECKSUMS_FILE, 'utf8')) as { files: Record<string, string> }).files;
}

/** Records the checksums of new migration files (and, with acceptChanged, of edited ones). */
export async function writeChecksums(acceptChanged: boolean): Promise<void> {
  const current = await currentChecksums();
  const recorded = await recordedChecksums().catch(() => ({}) as Record<string, string>);
  const files: Record<string, string> = {};
  for (const [file, sum] of Object.entries(current)) {
    const old = recorded[file];
    if (old !== undefined && old !== sum && !acceptChanged) {
      console.error(
        `${file} changed since its checksum was recorded: migrations are forward-only, write a new one ` +
          '(or pass --accept-changed if this edit is really meant to be the new baseline).',
      );
      process.exitCode = 1;
      return;
    }
    if (old === undefined) console.log(`recorded ${file}`);
    files[file] = sum;
  }
  await writeFile(
    CHECKSUMS_FILE,
    `${JSON.stringify(
      {
        comment:
          'SHA-256 of every migration file. Checked by test/foundation/migrationChecksums.test.ts; add new files with `npm run migrations:checksums`.',
        files,
      },
      null,
      2,
    )}\n`,
  );
}
