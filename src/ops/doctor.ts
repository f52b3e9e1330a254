import { type Config, parseConfig } from '../config.ts';
import { createSecretBox } from '../platform/crypto.ts';
import { loadFunctions, loadMigrations } from '../platform/db/migrate.ts';
import { openDatabase, resolveSecretKey, sampleStoredSecrets } from '../platform/db/open.ts';
import type { Db, Queryable } from '../platform/db/port.ts';

// `botpay doctor`: checks what an operator needs to trust a deployment — configuration, database,
// migrations, the secret key (it must decrypt what is stored) and the ledger (projections equal
// entries). Prints one line per check; exits 1 if any fails.

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

export async function runDoctor(env: NodeJS.ProcessEnv = process.env): Promise<Check[]> {
  const checks: Check[] = [];
  let config: Config;
  try {
    config = parseConfig(env);
    checks.push({
      name: 'configuration',
      ok: true,
      detail: `database ${config.databaseUrl ? 'PostgreSQL' : `embedded (${config.dataDir})`}, roles ${[...config.roles].join(',')}`,
    });
  } catch (error) {
    checks.push({ name: 'configuration', ok: false, detail: (error as Error).message });
    return checks;
  }
  let db: Db;
  try {
    db = await openDatabase(config);
    await db.ping();
    checks.push({ name: 'database', ok: true, detail: `${db.kind} reachable` });
  } catch (error) {
    checks.push({ name: 'database', ok: false, detail: (error as Error).message });
    return checks;
  }
  try {
    const known = await loadMigrations();
    let applied = new Set<number>();
    try {
      applied = new Set(
        (await db.query<{ version: number }>('SELECT version FROM schema_migrations')).map((r) => r.version),
      );
    } catch {
      // no table yet
    }
    let recorded = new Map<string, string>();
    try {
      recorded = new Map(
        (
          await db.query<{ name: string; checksum: string }>('SELECT name, checksum FROM schema_functions')
        ).map((r) => [r.name, r.checksum]),
      );
    } catch {
      // no table yet
    }
    const pending = [
      ...known.filter((m) => !applied.has(m.version)).map((m) => `${m.version}_${m.name}`),
      ...(await loadFunctions())
        .filter((f) => recorded.get(f.name) !== f.checksum)
        .map((f) => `functions/${f.name}`),
    ];
    checks.push({
      name: 'migrations',
      ok: pending.length === 0,
      detail:
        pending.length === 0
          ? `${known.length} applied`
          : `pending: ${pending.join(', ')} (run: botpay migrate)`,
    });

    try {
      const box = createSecretBox(await resolveSecretKey(config));
      const { checked, failures } = await sampleStoredSecrets(db, box).catch(() => ({
        checked: 0,
        failures: 0,
      }));
      checks.push({
        name: 'secret key',
        ok: failures === 0,
        detail:
          failures === 0
            ? `decrypts stored secrets (${checked} checked)`
            : `cannot decrypt ${failures} of ${checked} stored secrets: wrong SECRET_KEY?`,
      });
    } catch (error) {
      checks.push({ name: 'secret key', ok: false, detail: (error as Error).message });
    }

    const n = await walletLedgerDrift(db).catch(() => undefined);
    if (n !== undefined) {
      checks.push({
        name: 'ledger',
        ok: n === 0,
        detail:
          n === 0
            ? 'wallet balances equal their ledger entries'
            : `${n} wallets differ from their ledger entries`,
      });
    }
  } finally {
    await db.close();
  }
  return checks;
}

/**
 * How many wallets' projections differ from the sums of their ledger entries: 0 on a sound ledger.
 * The doctor's ledger check, and `botpay import`'s before it commits (src/ops/transfer.ts).
 */
export async function walletLedgerDrift(q: Queryable): Promise<number> {
  const rows = await q.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM wallets w
      LEFT JOIN (SELECT bot_id,
                        sum(amount_micros) FILTER (WHERE account = 'wallet_available') AS available,
                        sum(amount_micros) FILTER (WHERE account = 'wallet_held') AS held,
                        sum(amount_micros) FILTER (WHERE account = 'decoy_spent') AS decoy_spent,
                        sum(amount_micros) FILTER (WHERE account = 'decoy_held') AS decoy_held
                   FROM ledger_entries GROUP BY bot_id) l ON l.bot_id = w.bot_id
      WHERE w.available_micros <> coalesce(l.available, 0) OR w.held_micros <> coalesce(l.held, 0)
         OR w.decoy_spent_micros <> coalesce(l.decoy_spent, 0) OR w.decoy_held_micros <> coalesce(l.decoy_held, 0)`,
  );
  return rows[0]?.n ?? 0;
}

export async function doctorCommand(): Promise<number> {
  const checks = await runDoctor();
  for (const c of checks) console.log(`${c.ok ? 'ok  ' : 'FAIL'} ${c.name}: ${c.detail}`);
  return checks.every((c) => c.ok) ? 0 : 1;
}
