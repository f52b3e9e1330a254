import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { runDoctor } from '../../src/ops/doctor.ts';
import { exportDatabase, readExport } from '../../src/ops/transfer.ts';
import { migrate } from '../../src/platform/db/migrate.ts';
import { openDatabase } from '../../src/platform/db/open.ts';
import type { Db } from '../../src/platform/db/port.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import { randomBase32 } from '../../src/platform/ids.ts';
import { checkout, DIGITS, expectLedgerConsistent, poll, purchase, setupCard } from '../checkout/helpers.ts';
import { connectionFor, isPostgres, POSTGRES_URL } from '../support/db.ts';
import { runCli } from '../support/process.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  TEST_SECRET_KEY,
  testConfig,
} from '../support/service.ts';
import { creditDeposit, enableWallet, X402_ENV } from '../x402/helpers.ts';

// `botpay export` / `botpay import` (docs/deploy.md, "Moving from the embedded database to
// PostgreSQL"), as an operator runs them: an embedded database in a DATA_DIR of its own, filled by
// the service's own flows (a bot registered, claimed and funded, a card and a purchase, a partner
// wallet with a deposit, events and their webhook deliveries), exported by the real command line
// and imported into a new PostgreSQL schema, where the service then runs on the moved data.
// Needs PostgreSQL for the target: it runs in the PostgreSQL leg.

/** Every row of every table of the current schema, as JSON text in UTC, sorted: what "the same data" means. */
async function everyRow(db: Db): Promise<Record<string, string[]>> {
  return db.transaction(async (tx) => {
    await tx.query("SET LOCAL TimeZone = 'UTC'");
    const tables = await tx.query<{ name: string }>(
      'SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1',
    );
    const out: Record<string, string[]> = {};
    for (const { name } of tables) {
      if (name === 'schema_migrations' || name === 'schema_functions') continue;
      const rows = await tx.query<{ line: string }>(
        `SELECT to_jsonb(t)::text AS line FROM "${name}" t ORDER BY 1`,
      );
      out[name] = rows.map((r) => r.line);
    }
    return out;
  });
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const relationsIn = (schema: string) =>
  admin(async (c) => {
    const { rows } = await c.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM pg_class WHERE relnamespace = $1::regnamespace',
      [schema],
    );
    return rows[0]?.n ?? -1;
  });

/** The export's lines, edited, gzip'd again; the end line's checksum recomputed unless told not to. */
async function rewrite(
  from: string,
  to: string,
  edit: (lines: string[]) => void,
  options: { rehash?: boolean } = {},
): Promise<void> {
  const lines = gunzipSync(await readFile(from))
    .toString('utf8')
    .trimEnd()
    .split('\n');
  edit(lines);
  if (options.rehash !== false) {
    const body = lines
      .slice(0, -1)
      .map((l) => `${l}\n`)
      .join('');
    const end = JSON.parse(lines.at(-1) as string) as { end: { sha256: string } };
    end.end.sha256 = createHash('sha256').update(body).digest('hex');
    lines[lines.length - 1] = JSON.stringify(end);
  }
  await writeFile(to, gzipSync(`${lines.join('\n')}\n`));
}

/** The row lines of an export file by table, sorted (the order within a table is the engine's). */
async function fileRows(path: string): Promise<Record<string, string[]>> {
  const rows: Record<string, string[]> = {};
  const contents = await readExport(path, {
    async rows(table, lines) {
      rows[table.table] = [...(rows[table.table] ?? []), ...lines];
    },
  });
  for (const t of contents.tables) rows[t.table] = (rows[t.table] ?? []).sort();
  return rows;
}

/** A line of one line: the refusals are said in one line, without a stack trace. */
const oneLine = (text: string) => {
  expect(text.trim().split('\n'), text).toHaveLength(1);
  expect(text).not.toMatch(/\n\s+at /);
};

describe.runIf(isPostgres)('botpay export / import: the embedded database moved to PostgreSQL', () => {
  const cleanup: Array<() => Promise<unknown>> = [];
  afterAll(async () => {
    for (const fn of cleanup.reverse()) await fn().catch(() => {});
  });

  it('moves every row exactly; the service runs on the result; damaged, foreign-version and second imports are refused', {
    timeout: 180_000,
  }, async () => {
    const dir = await mkdtemp(join(tmpdir(), 'botpay-transfer-'));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const dataDir = join(dir, 'data');
    const file = join(dir, 'export.jsonl.gz');

    // 1. The embedded database as the service opens it (template copy, PGlite on its thread, the
    //    DATA_DIR lock), filled through the API.
    const embedded = await openDatabase(testConfig({ DATA_DIR: dataDir }));
    let embeddedOpen = true;
    cleanup.push(async () => embeddedOpen && embedded.close());
    // As `botpay serve` does at start: the template was migrated when it was made (at install), so a
    // migration added since then (a checkout that has moved on) is applied here.
    await migrate(embedded);
    const source = await createTestService({
      database: { db: embedded, drop: async () => {} },
      env: { DATA_DIR: dataDir, ...X402_ENV },
    });
    const owner = await createOwner(source);
    const bot = await activeBot(source, owner, { fundCents: 20_000 });
    const card = await setupCard(source, owner, bot.bot_id, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 400,
    });
    const bought = await checkout(source, bot, purchase(card.real_profile_index, 250));
    expect(bought.statusCode, bought.body).toBe(200);
    // Above the threshold: held for the owner, who decides after the move.
    const heldAnswer = await checkout(source, bot, purchase(card.real_profile_index, 450));
    expect(heldAnswer.statusCode, heldAnswer.body).toBe(202);
    const heldId = heldAnswer.json().confirmation_id as string;
    await enableWallet(source, owner, bot.bot_id);
    await creditDeposit(source, bot.bot_id, 3_000);
    const before = await expectLedgerConsistent(source, bot.bot_id);
    expect(before).toMatchObject({
      available_micros: (20_000 - 250 - 450) * 10_000,
      held_micros: 450 * 10_000,
    });
    await source.close();
    const rowsBefore = await everyRow(embedded);
    // The flows left rows in the tables this is about (a trigger applied twice would show there).
    for (const table of [
      'bots',
      'wallets',
      'ledger_entries',
      'events',
      'webhook_deliveries',
      'x402_wallets',
      'cards',
    ])
      expect(rowsBefore[table]?.length, table).toBeGreaterThan(0);

    // 2. Export: refused while the database is open elsewhere (the service holds DATA_DIR), then done.
    const busy = await runCli(['export', '--out', file], { DATA_DIR: dataDir });
    expect(busy.code, busy.stderr).toBe(2);
    expect(busy.stderr).toMatch(/in use by process \d+/);
    oneLine(busy.stderr);
    await embedded.close();
    embeddedOpen = false;
    const exported = await runCli(['export', '--out', file], { DATA_DIR: dataDir });
    expect(exported.code, exported.stderr).toBe(0);
    expect(exported.stdout).toMatch(/^Exported \d+ rows of \d+ tables and \d+ sequences/);
    const again = await runCli(['export', '--out', file], { DATA_DIR: dataDir });
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/exists/);

    // 3. A new, empty schema: the target, owned by a user of its own that is not a superuser (as
    //    docs/deploy.md says: the import needs the tables' owner, nothing more) where the test's
    //    user may create one.
    const schema = `t_${randomBase32(12)}`;
    const role = `botpay_import_${randomBase32(8)}`;
    const ownRole = await admin(async (c) => {
      const { rows } = await c.query<{ ok: boolean }>(
        'SELECT rolsuper OR rolcreaterole AS ok FROM pg_roles WHERE rolname = current_user',
      );
      if (!rows[0]?.ok) {
        await c.query(`CREATE SCHEMA ${schema}`);
        return false;
      }
      await c.query(`CREATE ROLE ${role} LOGIN PASSWORD 'import' NOSUPERUSER NOCREATEROLE`);
      await c.query(`CREATE SCHEMA ${schema} AUTHORIZATION ${role}`);
      return true;
    });
    cleanup.push(() =>
      admin(async (c) => {
        await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        if (ownRole) await c.query(`DROP ROLE IF EXISTS ${role}`);
      }),
    );
    const url = new URL(connectionFor(schema));
    if (ownRole) {
      url.username = role;
      url.password = 'import';
    }
    const target = { DATABASE_URL: url.toString(), SECRET_KEY: TEST_SECRET_KEY };

    // 4. Damaged files and a file of another schema version: refused in one line before anything
    //    is written (the schema stays empty, not even migrated).
    const bytes = await readFile(file);
    const truncated = join(dir, 'truncated.gz');
    await writeFile(truncated, bytes.subarray(0, Math.floor(bytes.length / 2)));
    const flipped = join(dir, 'flipped.gz');
    const damaged = Buffer.from(bytes);
    const at = Math.floor(damaged.length / 2);
    damaged[at] = (damaged[at] as number) ^ 0xff;
    await writeFile(flipped, damaged);
    const edited = join(dir, 'edited.gz');
    await rewrite(
      file,
      edited,
      (lines) => {
        // One ledger amount changed, the checksum left as it was: what a hand edit does.
        const i = lines.findIndex((l, k) => k > 0 && l.startsWith('[') && /"-?4500000"/.test(l));
        expect(i).toBeGreaterThan(0);
        lines[i] = (lines[i] as string).replace(/"(-?)4500000"/, '"$14500001"');
      },
      { rehash: false },
    );
    const future = join(dir, 'future.gz');
    await rewrite(file, future, (lines) => {
      const header = JSON.parse(lines[0] as string);
      header.schema.migrations.push([9999, 'from_the_future']);
      lines[0] = JSON.stringify(header);
    });
    const refusals = await Promise.all(
      [truncated, flipped, edited, future].map((f) => runCli(['import', '--in', f], target)),
    );
    const [cut, flip, edit, version] = refusals;
    expect(cut?.stderr).toMatch(/not a usable botpay export: the file ends in the middle \(truncated\?\)/);
    expect(flip?.stderr).toMatch(/not a usable botpay export/);
    expect(edit?.stderr).toMatch(/checksum does not match/);
    expect(version?.stderr).toMatch(
      /schema version is not this botpay's \(only the file has 9999_from_the_future\)/,
    );
    for (const r of refusals) {
      expect(r.code, r.stderr).toBe(2);
      oneLine(r.stderr);
      expect(r.stdout).toBe('');
    }
    expect(await relationsIn(schema)).toBe(0);

    // 5. Another SECRET_KEY than the installation's: loaded, checked, rolled back.
    const wrongKey = await runCli(['import', '--in', file], {
      ...target,
      SECRET_KEY: 'not-the-installations-key-0123456789abcdef',
    });
    expect(wrongKey.code, wrongKey.stderr).toBe(2);
    expect(wrongKey.stderr).toMatch(/^SECRET_KEY does not decrypt \d+ of \d+ stored secrets/);
    oneLine(wrongKey.stderr);

    // 6. The import.
    const imported = await runCli(['import', '--in', file], target);
    expect(imported.code, imported.stderr).toBe(0);
    const total = Object.values(rowsBefore).reduce((n, rows) => n + rows.length, 0);
    expect(imported.stdout).toMatch(new RegExp(`^Imported ${total} rows into \\d+ tables`));

    // A second import into the now full database: refused, nothing changed.
    const twice = await runCli(['import', '--in', file], target);
    expect(twice.code).toBe(2);
    expect(twice.stderr).toMatch(/already holds data \(rows in /);
    oneLine(twice.stderr);

    // 7. The same rows, every one: no balance applied twice, no second webhook delivery per event.
    const database = await openPostgres({ connectionString: POSTGRES_URL, schema });
    cleanup.push(() => database.close());
    expect(await everyRow(database)).toEqual(rowsBefore);
    // Exported again from PostgreSQL: the same file contents, line for line, table for table.
    const back = join(dir, 'back.jsonl.gz');
    await exportDatabase(database, back);
    expect(await fileRows(back)).toEqual(await fileRows(file));

    // 8. The service on PostgreSQL: the bot's key and the owner's token still work, the wallet is
    //    what it was, a new purchase goes through (the sequences went on), the doctor passes.
    const moved = await createTestService({
      database: { db: database, schema, drop: async () => {} },
      env: X402_ENV,
    });
    cleanup.push(() => moved.close());
    const status = await moved.app.inject({ url: '/api/v1/bot/status', headers: bot.auth });
    expect(status.statusCode, status.body).toBe(200);
    const stranger = await moved.app.inject({
      url: '/api/v1/bot/status',
      headers: { authorization: `Bearer ${bot.api_key.slice(0, -2)}xx` },
    });
    expect(stranger.statusCode).toBe(401);
    const bots = await moved.app.inject({ url: '/api/v1/owner/bots', headers: owner.auth });
    expect(bots.statusCode, bots.body).toBe(200);
    expect(await expectLedgerConsistent(moved, bot.bot_id)).toEqual(before);

    const decided = await moved.app.inject({
      method: 'POST',
      url: `/api/v1/owner/approvals/${heldId}/approve`,
      headers: owner.auth,
    });
    expect(decided.statusCode, decided.body).toBe(200);
    // The card's digits, encrypted under SECRET_KEY on the embedded side, read on this one.
    const approved = await poll(moved, bot, heldId);
    expect(approved.json()).toMatchObject({ status: 'approved', missing_digits: DIGITS });
    const next = await checkout(moved, bot, purchase(card.real_profile_index, 300));
    expect(next.statusCode, next.body).toBe(200);
    const after = await expectLedgerConsistent(moved, bot.bot_id);
    expect(after).toMatchObject({ available_micros: before.available_micros - 300 * 10_000, held_micros: 0 });

    const doctor = await runDoctor(target);
    expect(
      doctor.every((c) => c.ok),
      JSON.stringify(doctor),
    ).toBe(true);
    expect(doctor.find((c) => c.name === 'secret key')?.detail).toMatch(/\([1-9]\d* checked\)/);
  });
});
