import { writeChecksums } from '../test/support/migrationChecksums.ts';

// npm run migrations:checksums [-- --accept-changed]: records the checksum of every new migration
// file in src/migrations/checksums.json (see test/foundation/migrationChecksums.test.ts).
await writeChecksums(process.argv.includes('--accept-changed'));
