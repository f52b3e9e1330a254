import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config.ts';
import { migrate } from '../../src/platform/db/migrate.ts';
import { openDatabase } from '../../src/platform/db/open.ts';
import { buildTemplate, readTemplate, templateFile } from '../../src/platform/db/template.ts';

// `npm install` makes the embedded database's template (bin/prepare-embedded.mjs); a new DATA_DIR
// starts from it instead of PGlite's initdb.
describe('embedded database template', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('is named after the PGlite version, so an upgraded PGlite never loads an older directory', () => {
    expect(templateFile()).toMatch(/node_modules\/\.cache\/botpay\/pglite-\d+\.\d+\.\d+-template\.tar\.gz$/);
  });

  it('a new DATA_DIR starts migrated from it; a restart keeps what was written', async () => {
    // Installs made with scripts disabled have none: make it as the install step would.
    if (!existsSync(templateFile())) await buildTemplate();
    expect(await readTemplate()).toBeDefined();
    const dataDir = await mkdtemp(join(tmpdir(), 'botpay-template-'));
    dirs.push(dataDir);
    const config = { dataDir } as Config;
    const db = await openDatabase(config);
    try {
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

  it('a missing template file reads as none (the first start then runs initdb)', async () => {
    expect(await readTemplate(join(tmpdir(), 'no-such-template.tar.gz'))).toBeUndefined();
  });
});
