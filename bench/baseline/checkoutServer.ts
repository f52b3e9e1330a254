import { buildApp } from '../../src/app.ts';
import { parseConfig } from '../../src/config.ts';
import { systemClock } from '../../src/platform/clock.ts';
import type { AppContext } from '../../src/platform/context.ts';
import { createSecretBox } from '../../src/platform/crypto.ts';
import { migrate } from '../../src/platform/db/migrate.ts';
import { openDatabase } from '../../src/platform/db/open.ts';
import { createLogger } from '../../src/platform/logger.ts';
import { createMailer } from '../../src/platform/mailer.ts';
import { createMetrics } from '../../src/platform/metrics.ts';

// The service's own app (same factory, auth hook, pool) plus one bench-only route: the minimal
// durable transaction the checkout is compared with — one row update and one insert, committed.
const config = parseConfig();
const logger = createLogger(config.logLevel);
const db = await openDatabase(config);
await migrate(db);
await db.exec(`
  CREATE TABLE IF NOT EXISTS bench_rows (bot_id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
  CREATE TABLE IF NOT EXISTS bench_log (id bigserial PRIMARY KEY, bot_id text NOT NULL, at timestamptz NOT NULL);`);
const ctx: AppContext = {
  config,
  db,
  clock: systemClock,
  secrets: createSecretBox(config.secretKey!),
  mailer: createMailer({ smtpUrl: undefined, from: config.mailFrom, logger }),
  logger,
  metrics: createMetrics(db),
};
const app = await buildApp(ctx);
app.post('/api/v1/bot/bench/minimal', { schema: { hide: true } }, async (request) => {
  const botId = request.bot!.id;
  const now = new Date(ctx.clock.now());
  return db.transaction(async (tx) => {
    await tx.query('UPDATE bench_rows SET n = n + 1 WHERE bot_id = $1', [botId]);
    await tx.query('INSERT INTO bench_log (bot_id, at) VALUES ($1, $2)', [botId, now]);
    return { ok: true };
  });
});
await app.listen({ port: config.port, host: '127.0.0.1' });
const stop = async () => {
  await app.close();
  await db.close();
  process.exit(0);
};
process.once('SIGTERM', () => void stop());
process.once('SIGINT', () => void stop());
