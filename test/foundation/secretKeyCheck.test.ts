import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config.ts';
import { createSecretBox } from '../../src/platform/crypto.ts';
import { checkSecretKey, startService } from '../../src/server.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  TEST_SECRET_KEY,
  testConfig,
  type TestService,
} from '../support/service.ts';

// The service refuses to start with a SECRET_KEY that is not the one the stored secrets were
// written with (src/server.ts checkSecretKey): every webhook, card answer and owner mail would
// fail, and a checkout would be recorded before its answer failed.
describe('SECRET_KEY is checked against the stored secrets at start-up', () => {
  let database: TestDatabase;
  let svc: TestService;
  const OTHER_KEY = 'another-secret-key-0123456789abcdef0123456789';
  beforeAll(async () => {
    database = await createTestDatabase();
    svc = await createTestService({ database });
  });
  afterAll(async () => {
    await database.drop();
  });

  it('an empty database has nothing to check: any key starts', async () => {
    await expect(checkSecretKey(svc.ctx.db, createSecretBox(OTHER_KEY))).resolves.toBeUndefined();
  });

  it('the key the secrets were written with passes; another one is refused with a one-line cause', async () => {
    const owner = await createOwner(svc);
    await activeBot(svc, owner);
    await expect(checkSecretKey(svc.ctx.db, createSecretBox(TEST_SECRET_KEY))).resolves.toBeUndefined();
    await expect(checkSecretKey(svc.ctx.db, createSecretBox(OTHER_KEY))).rejects.toThrow(
      /^Invalid configuration: SECRET_KEY does not decrypt the secrets stored in this database/,
    );
  });

  it('one damaged secret among decryptable ones does not stop the service', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    await svc.ctx.db.query("UPDATE bots SET webhook_secret_enc = 'damaged' WHERE id = $1", [bot.bot_id]);
    await expect(checkSecretKey(svc.ctx.db, createSecretBox(TEST_SECRET_KEY))).resolves.toBeUndefined();
  });

  it('startService stops before serving (last: it closes the database)', async () => {
    const config = testConfig({ SECRET_KEY: OTHER_KEY });
    const started = startService(config, { db: database.db, listen: false, jobs: [] });
    await expect(started).rejects.toBeInstanceOf(ConfigError);
  });
});
