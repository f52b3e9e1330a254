import { describe, expect, it } from 'vitest';
import { currentChecksums, recordedChecksums } from '../support/migrationChecksums.ts';

// A migration that has run somewhere must never change (forward-only): its checksum is checked in
// (src/migrations/checksums.json). Baseline: the files as of migration 0020, including 0001 and
// 0002 as they are today (both were edited after they first landed). New migration: run
// `npm run migrations:checksums`.
describe('migration files', () => {
  it('match their recorded checksums, and every file has one', async () => {
    const current = await currentChecksums();
    const recorded = await recordedChecksums();
    const problems: string[] = [];
    for (const [file, sum] of Object.entries(recorded)) {
      if (current[file] === undefined)
        problems.push(`${file} was deleted or renamed (migrations are forward-only)`);
      else if (current[file] !== sum)
        problems.push(
          `${file} was edited after its checksum was recorded: leave it as it was and write a new migration`,
        );
    }
    for (const file of Object.keys(current)) {
      if (recorded[file] === undefined)
        problems.push(`${file} has no recorded checksum: run \`npm run migrations:checksums\``);
    }
    expect(problems, problems.join('\n')).toEqual([]);
  });
});
