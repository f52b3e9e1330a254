import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runDoctor } from '../../src/ops/doctor.ts';
import { connectionFor, createTestDatabase, isPostgres } from '../support/db.ts';
import { TEST_SECRET_KEY } from '../support/service.ts';

describe('botpay doctor', () => {
  it('reports a wrong configuration value by name', async () => {
    const checks = await runDoctor({ PORT: 'x' });
    expect(checks).toEqual([{ name: 'configuration', ok: false, detail: expect.stringContaining('PORT') }]);
  });

  it('passes on a migrated database and fails on a wrong secret key or a drifted ledger', async () => {
    let env: NodeJS.ProcessEnv;
    let cleanup = async () => {};
    if (isPostgres) {
      const database = await createTestDatabase();
      await database.db.close();
      env = { DATABASE_URL: connectionFor(database.schema!), SECRET_KEY: TEST_SECRET_KEY };
      cleanup = database.drop;
    } else {
      env = { DATA_DIR: await mkdtemp(join(tmpdir(), 'doctor-')), SECRET_KEY: TEST_SECRET_KEY };
      // An installation's template (bin/prepare-embedded.mjs) would give a new DATA_DIR every
      // migration: make the unmigrated directory this case is about with a bare initdb.
      const { openPglite } = await import('../../src/platform/db/pglite.ts');
      await (await openPglite({ dataDir: join(env.DATA_DIR as string, 'pg') })).close();
    }
    try {
      const fresh = await runDoctor(env);
      const migrations = fresh.find((c) => c.name === 'migrations');
      if (!isPostgres) {
        expect(migrations?.ok).toBe(false);
        expect(migrations?.detail).toMatch(/botpay migrate/);
        const { openDatabase } = await import('../../src/platform/db/open.ts');
        const { migrate } = await import('../../src/platform/db/migrate.ts');
        const { parseConfig } = await import('../../src/config.ts');
        const db = await openDatabase(parseConfig(env));
        await migrate(db);
        await db.close();
      }
      const { openDatabase } = await import('../../src/platform/db/open.ts');
      const { parseConfig } = await import('../../src/config.ts');
      const { createSecretBox } = await import('../../src/platform/crypto.ts');
      const db = await openDatabase(parseConfig(env));
      await db.query(
        `INSERT INTO bots (id, name, owner_email, owner_email_normalized, bot_type, api_key_hash, api_key_prefix, webhook_secret_enc, webhook_status, created_at)
         VALUES ('bot_doctor', 'd', 'd@example.com', 'd@example.com', 'primary', 'h', 'p', $1, 'active', now())`,
        [createSecretBox(TEST_SECRET_KEY).encrypt('whsec_x')],
      );
      await db.query(
        `INSERT INTO wallets (bot_id, status, updated_at) VALUES ('bot_doctor', 'active', now())`,
      );
      await db.close();

      const ok = await runDoctor(env);
      expect(
        ok.every((c) => c.ok),
        JSON.stringify(ok),
      ).toBe(true);
      expect(ok.map((c) => c.name)).toEqual([
        'configuration',
        'database',
        'migrations',
        'secret key',
        'ledger',
      ]);

      const wrongKey = await runDoctor({ ...env, SECRET_KEY: 'another-secret-key-0123456789abcdef0123' });
      expect(wrongKey.find((c) => c.name === 'secret key')?.ok).toBe(false);

      const db2 = await openDatabase(parseConfig(env));
      await db2.query(`UPDATE wallets SET available_micros = 5 WHERE bot_id = 'bot_doctor'`);
      await db2.close();
      const drifted = await runDoctor(env);
      expect(drifted.find((c) => c.name === 'ledger')).toMatchObject({
        ok: false,
        detail: expect.stringMatching(/1 wallets differ/),
      });
    } finally {
      await cleanup();
    }
  }, 60_000);
});
