import { existsSync } from 'node:fs';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { closeTo, startupCause } from '../../src/cli.ts';
import { isPostgres } from '../support/db.ts';
import { runCli } from '../support/process.ts';

// The command line as a newcomer meets it (issue 35, item 8), as real processes: --help on every
// command prints its help and does nothing else (no service, no migration, no DATA_DIR made),
// --version answers, a typo is named with what was meant, a missing option is said to be missing.
describe.runIf(!isPostgres)('botpay command line', () => {
  async function run(args: string[]) {
    const dataDir = join(await mkdtemp(join(tmpdir(), 'botpay-cli-')), 'data');
    const result = await runCli(args, { DATA_DIR: dataDir, PORT: '1' });
    return { ...result, touched: existsSync(dataDir) };
  }

  const commands: Array<[string[], RegExp]> = [
    [['serve', '--help'], /^Usage: botpay serve\n/],
    [['migrate', '--help'], /^Usage: botpay migrate\n/],
    [['doctor', '-h'], /^Usage: botpay doctor\n/],
    [['export', '--help'], /^Usage: botpay export --out FILE\n/],
    [['import', '--help'], /^Usage: DATABASE_URL=postgres:\/\/… SECRET_KEY=… botpay import --in FILE\n/],
    [['owner', 'token', 'create', '--help'], /^Usage: botpay owner token create --email ADDRESS/],
    [['owner', '--help'], /^Usage: botpay owner token create --email ADDRESS/],
    [['card', 'split', '--help'], /^Usage: botpay card split --bot BOT_ID/],
    [['tunnel', '--help'], /^Usage: BOTPAY_TUNNEL_TOKEN=svc_tun_… botpay tunnel/],
    [['mcp', '--help'], /^Usage: BOTPAY_API_KEY=svc_live_… BOTPAY_URL=URL botpay mcp/],
  ];

  it.each(commands)(
    '%j prints its help, exits 0 and does nothing else',
    async (args, usage) => {
      const result = await run(args);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(usage);
      expect(result.stderr).not.toMatch(/listening|migration|Dashboard|\{"level"/);
      expect(result.touched, 'DATA_DIR was not created').toBe(false);
    },
    60_000,
  );

  it('--version prints the package version', async () => {
    const { version } = JSON.parse(await readFile('package.json', 'utf8')) as { version: string };
    for (const flag of ['--version', '-v', 'version']) {
      const result = await run([flag]);
      expect(result.code).toBe(0);
      expect(result.stdout.trim()).toBe(`botpay ${version}`);
    }
  }, 60_000);

  it('typos are named, with what was meant', async () => {
    const serv = await run(['serv']);
    expect(serv.code).toBe(2);
    expect(serv.stderr).toMatch(/^Unknown command "serv"\. Did you mean "serve"\?/);
    const craete = await run(['owner', 'token', 'craete']);
    expect(craete.code).toBe(2);
    expect(craete.stderr).toMatch(
      /^Unknown subcommand "craete" of botpay owner token: did you mean "create"\?/,
    );
    const option = await run(['owner', 'token', 'create', '--emial', 'you@example.com']);
    expect(option.code).toBe(2);
    expect(option.stderr).toMatch(/Unknown option '--emial'/);
    expect(option.stderr).not.toMatch(/\n\s+at /);
    for (const r of [serv, craete, option]) expect(r.touched).toBe(false);
  }, 60_000);

  it('a missing --email is said to be missing; a wrong one to be wrong', async () => {
    const missing = await run(['owner', 'token', 'create']);
    expect(missing.code).toBe(2);
    expect(missing.stderr.trim()).toBe(
      "owner token create: --email is missing: give the owner's e-mail address (--email you@example.com)",
    );
    const wrong = await run(['owner', 'token', 'create', '--email', 'nope']);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr.trim()).toBe('owner token create: --email "nope" is not an e-mail address');
  }, 60_000);

  it('export and import say what is missing in one line, touching nothing', async () => {
    const noOut = await run(['export']);
    expect(noOut.code).toBe(2);
    expect(noOut.stderr.trim()).toMatch(/^botpay export: --out is missing/);
    // No embedded database in DATA_DIR: nothing to export, and none is made.
    const nothing = await run([
      'export',
      '--out',
      join(await mkdtemp(join(tmpdir(), 'botpay-cli-')), 'x.gz'),
    ]);
    expect(nothing.code).toBe(2);
    expect(nothing.stderr.trim()).toMatch(
      /^botpay export: there is no embedded database in DATA_DIR \(.*\): nothing to export\.$/,
    );
    const noUrl = await run(['import', '--in', 'export.jsonl.gz']);
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr.trim()).toMatch(/^botpay import: DATABASE_URL is not set/);
    for (const r of [noOut, nothing, noUrl]) {
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.touched).toBe(false);
    }
  }, 60_000);

  it('closeTo: one edit or one swap of neighbours is a typo; another word is not', () => {
    expect(closeTo('craete', ['create'])).toBe(true);
    expect(closeTo('serv', ['serve'])).toBe(true);
    expect(closeTo('Serve', ['serve'])).toBe(true);
    expect(closeTo('tokn', ['token'])).toBe(true);
    expect(closeTo('delete', ['create'])).toBe(false);
    expect(closeTo('x', ['mcp'])).toBe(false);
  });
});

describe('start-up causes name the setting that is wrong', () => {
  const withDatabaseUrl = <T>(url: string | undefined, run: () => T): T => {
    const before = process.env.DATABASE_URL;
    if (url === undefined) delete process.env.DATABASE_URL;
    else process.env.DATABASE_URL = url;
    try {
      return run();
    } finally {
      if (before === undefined) delete process.env.DATABASE_URL;
      else process.env.DATABASE_URL = before;
    }
  };
  const lookupFailure = (hostname: string) =>
    Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND', hostname });

  it('blames DATABASE_URL for its own host, and only then', () => {
    withDatabaseUrl('postgres://app@db.internal:5432/botpay', () => {
      expect(startupCause(lookupFailure('db.internal'))).toMatch(
        /^Cannot reach the database at DATABASE_URL \(ENOTFOUND\)/,
      );
      expect(startupCause(lookupFailure('smtp.example.net'))).toBe(
        'Cannot reach smtp.example.net (ENOTFOUND): check the setting that names it.',
      );
      const refused = Object.assign(new Error('connect ECONNREFUSED'), {
        code: 'ECONNREFUSED',
        address: '127.0.0.1',
      });
      expect(startupCause(refused)).toMatch(/^Cannot reach 127\.0\.0\.1 \(ECONNREFUSED\)/);
    });
    withDatabaseUrl('postgres://app@127.0.0.1/botpay', () => {
      const refused = Object.assign(new Error('connect ECONNREFUSED'), {
        code: 'ECONNREFUSED',
        address: '127.0.0.1',
      });
      expect(startupCause(refused)).toMatch(/DATABASE_URL/);
    });
  });

  it('on the embedded database (no DATABASE_URL) never names DATABASE_URL', () => {
    withDatabaseUrl(undefined, () => {
      expect(startupCause(lookupFailure('smtp.example.net'))).toBe(
        'Cannot reach smtp.example.net (ENOTFOUND): check the setting that names it.',
      );
      expect(startupCause({ code: 'ETIMEDOUT' })).not.toMatch(/DATABASE_URL/);
    });
  });
});
