import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { ConfigError, type Config, parseConfig } from './config.ts';
import { findOrCreateOwner, createOwnerToken } from './owners/auth.ts';
import { systemClock } from './platform/clock.ts';
import { migrate } from './platform/db/migrate.ts';
import { DataDirBusyError, openDatabase, resolveSecretKey } from './platform/db/open.ts';
import { checkListenAddress } from './platform/startupChecks.ts';
import type { Service } from './server.ts';

const USAGE = `Usage: botpay <command> [options]

Commands:
  serve                          Start the service (API, dashboard, workers, tunnel relay)
  migrate                        Apply pending database migrations and exit
  doctor                         Check configuration, database, migrations, secret key and ledger
  export --out FILE              Write the whole database (embedded or DATABASE_URL) to one file
  import --in FILE               Load such a file into an empty PostgreSQL database (DATABASE_URL)
  owner token create --email E [--name N]
                                 Create the owner if needed and print a new owner API token
  card split --bot B --out F …   Split a card on this computer (number from stdin) and activate it
  tunnel --server URL --port N --path P
                                 Run the managed-tunnel client (forwards webhooks to 127.0.0.1:N;
                                 the token from BOTPAY_TUNNEL_TOKEN or --token-file FILE)
  mcp                            MCP server on stdio with the bot's tools (BOTPAY_API_KEY, BOTPAY_URL)

Configuration comes from environment variables (see README.md).`;

/**
 * Each command's own help, printed by `botpay <command> --help` (or -h) before anything runs: help
 * never starts the service, migrates or creates a token.
 */
const HELP: Record<string, string> = {
  serve: `Usage: botpay serve

Starts the service: the bot API, the owner API and dashboard, the background workers and the
managed-tunnel relay, as ROLES says. Configuration comes from environment variables (README.md,
"Configuration"): with no DATABASE_URL the embedded database lives in DATA_DIR (./data).
Stops cleanly on Ctrl-C or SIGTERM.`,
  migrate: `Usage: botpay migrate

Applies the pending database migrations (DATABASE_URL, or the embedded database in DATA_DIR) and
exits. \`botpay serve\` applies them too; this is for deployments that migrate as a step of their own.`,
  doctor: `Usage: botpay doctor

Checks the configuration, the database, the migrations, the secret key and the ledger, one line
each; exit code 1 when a check fails.`,
  export: `Usage: botpay export --out FILE

Writes the database the service uses (the embedded one in DATA_DIR, or DATABASE_URL when set) to
FILE: a gzip of JSON lines with the schema version, every table's rows and the sequences, read in
one snapshot. The database must be at this version's schema (\`botpay migrate\`). With the embedded
database, stop the service first: PGlite cannot share DATA_DIR. FILE must not exist yet; it is
written with mode 0600 (it holds hashed keys and encrypted secrets, never SECRET_KEY).`,
  import: `Usage: DATABASE_URL=postgres://… SECRET_KEY=… botpay import --in FILE

Loads a file written by \`botpay export\` into the PostgreSQL database at DATABASE_URL, which must hold
no data: migrates it to the file's schema version (a file of another botpay version is refused),
loads every row in one transaction with the tables' triggers off (balances are copied, not applied
again), sets the sequences, and commits only when the row counts equal the file's, the wallets
equal their ledger entries and SECRET_KEY (the exported installation's: DATA_DIR/secret_key for an
embedded one) decrypts the stored secrets. docs/deploy.md: "Moving from the embedded database to
PostgreSQL".`,
  owner: `Usage: botpay owner token create --email ADDRESS [--name NAME]

Creates the owner with that e-mail address if needed and prints a new owner API token (shown
once). With the embedded database, run it while the service is stopped; afterwards create tokens
on the dashboard's Settings page.`,
  tunnel: `Usage: BOTPAY_TUNNEL_TOKEN=svc_tun_… botpay tunnel --server URL --port N [--path P]

Runs the managed-tunnel client for a bot. \`botpay tunnel --help\` lists every option.`,
  mcp: `Usage: BOTPAY_API_KEY=svc_live_… BOTPAY_URL=URL botpay mcp

An MCP server on standard input/output with the bot's tools.`,
};

/** Commands whose own parser prints a fuller help for --help (it does nothing else). */
const OWN_HELP = new Set(['card', 'tunnel']);

type Command = (args: string[], options: MainOptions) => Promise<number>;

export interface MainOptions {
  /** How bin/botpay.mjs loaded this code: its compiled build (dist/) or the sources through tsx. */
  runtime?: 'compiled' | 'tsx';
  /** The package's version, read by bin/botpay.mjs from package.json (for --version). */
  version?: string;
}

const commands: Record<string, Command> = {
  serve: async (_args, options) => {
    const config = parseConfig();
    // What an operator gets wrong first is judged before the database starts, each in one line
    // naming its variable (the listening address, DATA_DIR, SECRET_KEY). Then the database opens
    // (PGlite on a thread of its own) while the service's modules load: one after the other, the
    // two took about 0.4 s each of every start.
    await checkListenAddress(config.host, config.port);
    await resolveSecretKey(config);
    const opening = openDatabase(config);
    opening.catch(() => {}); // its failure is startService's to report, when it awaits it
    // Plain lines for people first, apart from the JSON log: where to go, and where sign-in links
    // appear. The JSON lines of start-up wait until they are out (or until start-up failed), so the
    // dashboard's address is the first thing on screen, as the README says.
    const held = new HeldLines(process.stdout);
    const bold = (text: string) => (process.stderr.isTTY ? `\x1b[1m${text}\x1b[0m` : text);
    let service: Service;
    try {
      // Loaded here: the other commands (card split, tunnel, …) start without the whole service.
      const { startService } = await import('./server.ts');
      service = await startService(config, {
        db: opening,
        logStream: held,
        onListening: () => {
          process.stderr.write(`${bold(`Dashboard: ${config.baseUrl}`)}\n`);
          if (!config.smtpUrl) {
            process.stderr.write(
              'SMTP_URL is not set: sign-in links are printed here instead of being mailed.\n',
            );
          }
          held.release();
        },
      });
    } catch (error) {
      // Whatever step failed, the database opened above must not keep the process alive.
      await opening.then((db) => db.close()).catch(() => {});
      throw error;
    } finally {
      held.release();
    }
    const log = service.ctx.logger;
    log.info(
      {
        url: config.baseUrl,
        port: config.port,
        roles: [...config.roles],
        database: service.ctx.db.kind,
        runtime: options.runtime,
        // Where the start-up's time went, step by step (StartupTimings).
        startup_ms: service.startupMs,
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
    const words = ['token', 'create'];
    for (const [i, word] of words.entries()) {
      const given = args[i];
      if (given === word) continue;
      const said = words.slice(0, i).join(' ');
      const problem =
        given === undefined || given.startsWith('-')
          ? `botpay owner ${said ? `${said} ` : ''}needs "${word}"`
          : `Unknown subcommand "${given}" of botpay owner${said ? ` ${said}` : ''}${closeTo(given, [word]) ? `: did you mean "${word}"?` : ''}`;
      console.error(`${problem}\n\n${HELP.owner}`);
      return 2;
    }
    const { values } = parseArgs({
      args: args.slice(2),
      // --name as on the Settings page; --label is its older spelling.
      options: { email: { type: 'string' }, name: { type: 'string' }, label: { type: 'string' } },
    });
    const email = values.email?.trim();
    if (!email) {
      console.error(
        "owner token create: --email is missing: give the owner's e-mail address (--email you@example.com)",
      );
      return 2;
    }
    if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) {
      console.error(`owner token create: --email ${JSON.stringify(email)} is not an e-mail address`);
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

/** A stream that keeps what is written to it until release(), then writes through to `target`. */
class HeldLines extends Writable {
  private held: Array<string | Buffer> | null = [];

  constructor(private readonly target: NodeJS.WritableStream) {
    super();
  }

  override _write(
    chunk: string | Buffer,
    _encoding: BufferEncoding,
    done: (error?: Error | null) => void,
  ): void {
    if (this.held) this.held.push(chunk);
    else this.target.write(chunk);
    done();
  }

  release(): void {
    const held = this.held;
    if (!held) return;
    this.held = null;
    for (const chunk of held) this.target.write(chunk);
  }
}

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
  if (name === '--version' || name === '-v' || name === 'version') {
    console.log(`botpay ${options.version ?? 'unknown version'}`);
    process.exitCode = 0;
    return;
  }
  const known = [...new Set([...Object.keys(commands), ...Object.keys(HELP), ...LAZY_COMMANDS])];
  if (!known.includes(name)) {
    const near = known.filter((k) => closeTo(name, [k]));
    const hint = near.length ? ` Did you mean "${near.join('" or "')}"?` : '';
    console.error(`Unknown command "${name}".${hint}\n\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  // Help before anything runs (and before a lazy command's module is even loaded).
  const wantsHelp = rest.some((a) => a === '--help' || a === '-h');
  if (wantsHelp && !OWN_HELP.has(name)) {
    console.log(HELP[name] ?? USAGE);
    process.exitCode = 0;
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
    // node:util parseArgs: an unknown option, a missing value… said in one line with the usage.
    const code = (error as { code?: string }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS')) {
      console.error(`botpay ${name}: ${(error as Error).message}\n\n${HELP[name] ?? USAGE}`);
      process.exitCode = 2;
      return;
    }
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
  const e = error as
    | { code?: string; port?: number; address?: string; hostname?: string; message?: string }
    | undefined;
  switch (e?.code) {
    case 'EADDRINUSE':
      return `Port ${e.port ?? process.env.PORT ?? ''} on ${e.address ?? 'this host'} is already in use: stop the other program or set PORT to a free port.`;
    case 'EACCES':
      return `Not allowed to listen on port ${e.port ?? process.env.PORT ?? ''}: choose a port above 1023 (PORT).`;
    case 'ECONNREFUSED':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'ETIMEDOUT':
      return unreachableCause(e.code, e.hostname ?? e.address);
    case '28P01':
    case '28000':
      return 'The database refused the credentials in DATABASE_URL.';
    case '3D000':
      return `The database named in DATABASE_URL does not exist: ${e.message ?? ''}`.trim();
    default:
      return undefined;
  }
}

/**
 * A host that cannot be reached or resolved is DATABASE_URL's only when DATABASE_URL names it: on
 * the embedded database, or for another host (an SMTP relay, say), blaming DATABASE_URL would send
 * the operator to the wrong setting.
 */
function unreachableCause(code: string, host: string | undefined): string {
  const url = process.env.DATABASE_URL;
  let databaseHost: string | undefined;
  try {
    databaseHost = url ? new URL(url).hostname || 'localhost' : undefined;
  } catch {
    databaseHost = undefined;
  }
  if (databaseHost !== undefined && (host === undefined || host === databaseHost)) {
    return `Cannot reach the database at DATABASE_URL (${code}): is PostgreSQL running and the address right?`;
  }
  return `Cannot reach ${host ?? 'a host the configuration names'} (${code}): check the setting that names it.`;
}

/** True when `typed` is one edit (or one swap of neighbours) away from one of `words`: a typo. */
export function closeTo(typed: string, words: readonly string[]): boolean {
  return words.some(
    (word) => editDistance(typed.toLowerCase(), word) <= Math.max(1, Math.floor(word.length / 3)),
  );
}

/** Damerau–Levenshtein distance (optimal string alignment): a swap of two letters counts as one. */
function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  const at = (i: number, j: number) => d[i]?.[j] ?? Number.POSITIVE_INFINITY;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, at(i - 2, j - 2) + 1);
      const row = d[i];
      if (row) row[j] = best;
    }
  }
  return at(a.length, b.length);
}

const LAZY_COMMANDS = ['doctor', 'export', 'import', 'card', 'tunnel', 'mcp'];

// Commands that live in their modules (tunnel client, doctor, export/import) are loaded only when used.
async function loadLazyCommand(name: string): Promise<Command | undefined> {
  const lazy: Record<string, () => Promise<Command>> = {
    doctor: async () => (await import('./ops/doctor.ts')).doctorCommand,
    export: async () => (await import('./ops/transfer.ts')).exportCommand,
    import: async () => (await import('./ops/transfer.ts')).importCommand,
    card: async () => (await import('./cards/splitCli.ts')).cardCommand,
    tunnel: async () => (await import('./tunnels/cli.ts')).tunnelCommand,
    mcp: async () => (await import('./mcp/server.ts')).mcpCommand,
  };
  return lazy[name] ? lazy[name]() : undefined;
}

export type { Config };
