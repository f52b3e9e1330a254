import { parseArgs } from 'node:util';
import { ConfigError, type Config, parseConfig } from './config.ts';
import { findOrCreateOwner, createOwnerToken } from './owners/auth.ts';
import { systemClock } from './platform/clock.ts';
import { migrate } from './platform/db/migrate.ts';
import { DataDirBusyError, openDatabase } from './platform/db/open.ts';

const USAGE = `Usage: botpay <command> [options]

Commands:
  serve                          Start the service (API, dashboard, workers, tunnel relay)
  migrate                        Apply pending database migrations and exit
  doctor                         Check configuration, database, migrations, secret key and ledger
  owner token create --email E [--name N]
                                 Create the owner if needed and print a new owner API token
  card split --bot B --out F …   Split a card on this computer (number from stdin) and activate it
  tunnel --server URL --port N --path P
                                 Run the managed-tunnel client (forwards webhooks to 127.0.0.1:N;
                                 the token from BOTPAY_TUNNEL_TOKEN or --token-file FILE)
  mcp                            MCP server on stdio with the bot's tools (BOTPAY_API_KEY, BOTPAY_URL)

Configuration comes from environment variables (see README.md).`;

type Command = (args: string[], options: MainOptions) => Promise<number>;

export interface MainOptions {
  /** How bin/botpay.mjs loaded this code: its compiled build (dist/) or the sources through tsx. */
  runtime?: 'compiled' | 'tsx';
}

const commands: Record<string, Command> = {
  serve: async (_args, options) => {
    const config = parseConfig();
    // Loaded here: the other commands (card split, tunnel, …) start without the whole service.
    const { startService } = await import('./server.ts');
    const service = await startService(config);
    const log = service.ctx.logger;
    log.info(
      {
        url: config.baseUrl,
        port: config.port,
        roles: [...config.roles],
        database: service.ctx.db.kind,
        runtime: options.runtime,
      },
      'service started',
    );
    // The signal handlers first: the service is already listening, and a SIGTERM in the pause below
    // must shut it down cleanly, not kill it with the database open.
    const stopped = new Promise<void>((resolve) => {
      const stop = (signal: string) => {
        log.info({ signal }, 'shutting down');
        service.close().then(resolve, (error) => {
          log.error({ err: error }, 'error during shutdown');
          resolve();
        });
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
    });
    // Plain lines for people, apart from the JSON logs: where to go, and where sign-in links appear.
    // A moment after the start-up log lines (pino writes them asynchronously), so that these are
    // the last thing on screen rather than buried above them.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const bold = (text: string) => (process.stderr.isTTY ? `\x1b[1m${text}\x1b[0m` : text);
    process.stderr.write(`${bold(`Dashboard: ${config.baseUrl}`)}\n`);
    if (!config.smtpUrl) {
      process.stderr.write('SMTP_URL is not set: sign-in links are printed here instead of being mailed.\n');
    }
    await stopped;
    return 0;
  },

  migrate: async () => {
    const config = parseConfig();
    const db = await openDatabase(config);
    try {
      const applied = await migrate(db);
      console.log(applied.length ? `Applied migrations: ${applied.join(', ')}` : 'Database is up to date.');
    } finally {
      await db.close();
    }
    return 0;
  },

  owner: async (args) => {
    if (args[0] !== 'token' || args[1] !== 'create') {
      console.error('Usage: botpay owner token create --email E [--name N]');
      return 2;
    }
    const { values } = parseArgs({
      args: args.slice(2),
      // --name as on the Settings page; --label is its older spelling.
      options: { email: { type: 'string' }, name: { type: 'string' }, label: { type: 'string' } },
    });
    const email = values.email?.trim();
    if (!email || !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) {
      console.error('owner token create: --email must be a valid e-mail address');
      return 2;
    }
    const config = parseConfig();
    const db = await openDatabase(config);
    try {
      await migrate(db);
      const now = systemClock.now();
      const token = await db.transaction(async (tx) => {
        const owner = await findOrCreateOwner(tx, email, now);
        return createOwnerToken(
          tx,
          owner.id,
          now,
          (values.name ?? values.label ?? 'cli').trim().slice(0, 100) || 'cli',
        );
      });
      console.log(token);
      console.error(
        'Owner API token created. It is shown once: store it now. Use it as Authorization: Bearer <token>.',
      );
    } finally {
      await db.close();
    }
    return 0;
  },
};

export function registerCommand(name: string, command: Command): void {
  commands[name] = command;
}

export async function main(argv: string[], options: MainOptions = {}): Promise<void> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(USAGE);
    process.exitCode = name ? 0 : 2;
    return;
  }
  const command = commands[name] ?? (await loadLazyCommand(name));
  if (!command) {
    console.error(`Unknown command "${name}".\n\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  try {
    process.exitCode = await command(rest, options);
  } catch (error) {
    if (error instanceof ConfigError || error instanceof DataDirBusyError) {
      console.error(error.message);
      process.exitCode = 2;
      return;
    }
    const cause = startupCause(error);
    if (cause) {
      console.error(cause);
      process.exitCode = 2;
      return;
    }
    console.error(error instanceof Error ? (error.stack ?? error.message) : error);
    process.exitCode = 1;
  }
}

/**
 * A one-line cause for the failures an operator meets at start-up (a busy port, a database that
 * cannot be reached or refuses us), instead of a stack trace; undefined for anything else.
 */
export function startupCause(error: unknown): string | undefined {
  const e = error as { code?: string; port?: number; address?: string; message?: string } | undefined;
  switch (e?.code) {
    case 'EADDRINUSE':
      return `Port ${e.port ?? process.env.PORT ?? ''} on ${e.address ?? 'this host'} is already in use: stop the other program or set PORT to a free port.`;
    case 'EACCES':
      return `Not allowed to listen on port ${e.port ?? process.env.PORT ?? ''}: choose a port above 1023 (PORT).`;
    case 'ECONNREFUSED':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'ETIMEDOUT':
      return `Cannot reach the database at DATABASE_URL (${e.code}): is PostgreSQL running and the address right?`;
    case '28P01':
    case '28000':
      return 'The database refused the credentials in DATABASE_URL.';
    case '3D000':
      return `The database named in DATABASE_URL does not exist: ${e.message ?? ''}`.trim();
    default:
      return undefined;
  }
}

// Commands that live in their modules (tunnel client, doctor) are loaded only when used.
async function loadLazyCommand(name: string): Promise<Command | undefined> {
  const lazy: Record<string, () => Promise<Command>> = {
    doctor: async () => (await import('./ops/doctor.ts')).doctorCommand,
    card: async () => (await import('./cards/splitCli.ts')).cardCommand,
    tunnel: async () => (await import('./tunnels/cli.ts')).tunnelCommand,
    mcp: async () => (await import('./mcp/server.ts')).mcpCommand,
  };
  return lazy[name] ? lazy[name]() : undefined;
}

export type { Config };
