import { existsSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config.ts';
import { migrate } from '../../src/platform/db/migrate.ts';
import { openDatabase } from '../../src/platform/db/open.ts';
import { buildTemplate, copyTemplate, isDataDir, templateDir } from '../../src/platform/db/template.ts';

// `npm install` makes the embedded database's template (bin/prepare-embedded.mjs); a new DATA_DIR
// starts as a copy of it instead of running PGlite's initdb.
describe('embedded database template', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('is named after the PGlite version, so an upgraded PGlite never loads an older directory', () => {
    expect(templateDir()).toMatch(/node_modules\/\.cache\/botpay\/pglite-\d+\.\d+\.\d+-template$/);
  });

  it('a new DATA_DIR starts migrated from it; a restart keeps what was written', async () => {
    // Installs made with scripts disabled have none: make it as the install step would.
    if (!isDataDir(templateDir())) await buildTemplate();
    const dataDir = await mkdtemp(join(tmpdir(), 'botpay-template-'));
    dirs.push(dataDir);
    const config = { dataDir } as Config;
    const db = await openDatabase(config);
    try {
      // The copy is the service's own: PostgreSQL's modes, whatever the template's (readable by all).
      expect(statSync(join(dataDir, 'pg')).mode & 0o777).toBe(0o700);
      expect(statSync(join(dataDir, 'pg', 'PG_VERSION')).mode & 0o777).toBe(0o600);
      expect(statSync(join(templateDir(), 'PG_VERSION')).mode & 0o777).toBe(0o644);
      // Only migrations newer than the template (sources updated since `npm install`) run now.
      const applied = await migrate(db);
      expect(applied).not.toContain(1);
      await db.query(
        "INSERT INTO owners (id, email, email_normalized, created_at) VALUES ('own_template', 'template@example.com', 'template@example.com', now())",
      );
    } finally {
      await db.close();
    }
    const again = await openDatabase(config);
    try {
      expect(await migrate(again)).toEqual([]);
      const rows = await again.query<{ email: string }>("SELECT email FROM owners WHERE id = 'own_template'");
      expect(rows).toEqual([{ email: 'template@example.com' }]);
    } finally {
      await again.close();
    }
  });

  it('a missing template copies nothing (the first start then runs initdb)', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'botpay-template-'));
    dirs.push(dataDir);
    expect(await copyTemplate(join(dataDir, 'pg'), join(tmpdir(), 'no-such-template'))).toBe(false);
    expect(existsSync(join(dataDir, 'pg'))).toBe(false);
  });

  it('a directory left without PG_VERSION (a start that stopped half-way) is replaced by the copy', async () => {
    if (!isDataDir(templateDir())) await buildTemplate();
    const dataDir = await mkdtemp(join(tmpdir(), 'botpay-template-'));
    dirs.push(dataDir);
    const pgDir = join(dataDir, 'pg');
    await mkdir(join(pgDir, 'base'), { recursive: true });
    await writeFile(join(pgDir, 'base', 'partial'), 'x');
    expect(await copyTemplate(pgDir)).toBe(true);
    expect(isDataDir(pgDir)).toBe(true);
    expect(existsSync(join(pgDir, 'base', 'partial'))).toBe(false);
    // Nothing is left beside it: the copy was made in a temporary directory and renamed.
    expect(await readdir(dataDir)).toEqual(['pg']);
  });
});
