import { chmod, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Config } from '../../config.ts';
import { randomHex, type SecretBox } from '../crypto.ts';
import { ensureDataDir } from '../startupChecks.ts';
import { openPgliteThread } from './pgliteThread.ts';
import type { Db, Queryable } from './port.ts';
import { copyTemplate, isDataDir } from './template.ts';

/** Opens the database the configuration names: PostgreSQL with DATABASE_URL, else PGlite in DATA_DIR. */
export async function openDatabase(config: Config): Promise<Db> {
  if (config.databaseUrl) {
    // The PostgreSQL driver (pg) is loaded only for PostgreSQL: the embedded database never needs it.
    const { openPostgres } = await import('./postgres.ts');
    return openPostgres({
      connectionString: config.databaseUrl,
      max: config.databasePoolSize,
      poolWaitMs: config.databasePoolWaitMs,
    });
  }
  const dir = resolve(config.dataDir);
  await ensureDataDir(dir);
  const release = await lockDataDir(dir);
  try {
    const pgDir = join(dir, 'pg');
    // A new data directory starts as a copy of the installation's template (initdb and migrations
    // done); without one, PGlite runs initdb.
    if (!isDataDir(pgDir)) await copyTemplate(pgDir);
    // On a thread of its own (pgliteThread.ts): its queries never hold up the event loop.
    const db = await openPgliteThread({ dataDir: pgDir, maxWaitMs: config.databasePoolWaitMs });
    const close = db.close.bind(db);
    return {
      ...db,
      async close() {
        await close();
        await release();
      },
    };
  } catch (error) {
    await release();
    throw error;
  }
}

export class DataDirBusyError extends Error {
  constructor(dir: string, pid: number) {
    super(
      `The embedded database in ${dir} is in use by process ${pid} (the running service). ` +
        'Stop the service first, or use PostgreSQL (DATABASE_URL) to run commands while it runs.',
    );
    this.name = 'DataDirBusyError';
  }
}

// One process owns an embedded data directory: PGlite has no multi-process access.
async function lockDataDir(dir: string): Promise<() => Promise<void>> {
  const lockFile = join(dir, 'service.pid');
  try {
    const pid = Number((await readFile(lockFile, 'utf8')).trim());
    if (pid && pid !== process.pid && isAlive(pid)) throw new DataDirBusyError(dir, pid);
  } catch (error) {
    if (error instanceof DataDirBusyError) throw error;
  }
  await writeFile(lockFile, String(process.pid), { mode: 0o600 });
  return async () => {
    await rm(lockFile, { force: true });
  };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * SECRET_KEY from the configuration; for the embedded database it is generated on first start and
 * kept in DATA_DIR/secret_key (mode 0600) so that encrypted columns stay readable after a restart.
 */
export async function resolveSecretKey(config: Config): Promise<string> {
  if (config.secretKey) return config.secretKey;
  if (config.databaseUrl) throw new Error('SECRET_KEY is required when DATABASE_URL is set');
  const dir = resolve(config.dataDir);
  await ensureDataDir(dir);
  const file = join(dir, 'secret_key');
  try {
    const existing = (await readFile(file, 'utf8')).trim();
    if (existing.length >= 32) return existing;
  } catch {
    // first start: generate below
  }
  const key = randomHex(32);
  await writeFile(file, `${key}\n`, { mode: 0o600, flag: 'wx' }).catch(async () => {
    // Another process created it first: use theirs.
  });
  await chmod(file, 0o600);
  return (await readFile(file, 'utf8')).trim();
}

/**
 * Tries SECRET_KEY on the newest bots' webhook secrets (at most five): how many were tried and how
 * many did not decrypt. Start-up refuses a key that decrypts none (src/server.ts, checkSecretKey);
 * `botpay doctor` reports any failure.
 */
export async function sampleStoredSecrets(
  db: Queryable,
  secrets: SecretBox,
): Promise<{ checked: number; failures: number }> {
  const sample = await db.query<{ webhook_secret_enc: string }>(
    'SELECT webhook_secret_enc FROM bots ORDER BY created_at DESC LIMIT 5',
  );
  let failures = 0;
  for (const row of sample) {
    try {
      secrets.decrypt(row.webhook_secret_enc);
    } catch {
      failures++;
    }
  }
  return { checked: sample.length, failures };
}
