import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

// Install hygiene, checked on the committed files (no registry needed): every locked package runs
// on the oldest Node the project claims, so `npm ci` prints no EBADENGINE; and the postinstall step
// (bin/lock-optional.mjs) finds nothing to add, so a fresh clone's `npm ci` or `npm install` leaves
// package-lock.json as committed.

const ROOT = process.cwd();
const semver = createRequire(import.meta.url)('semver') as {
  minVersion(range: string): { version: string } | null;
  satisfies(version: string, range: string): boolean;
};

describe('install hygiene', () => {
  it('every package in the lock accepts the oldest Node version package.json admits', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8'));
    const oldest = semver.minVersion(pkg.engines.node)!.version;
    expect(lock.packages[''].engines.node).toBe(pkg.engines.node);
    const refused = Object.entries(lock.packages as Record<string, { engines?: { node?: string } }>)
      .filter(([, entry]) => entry.engines?.node && !semver.satisfies(oldest, entry.engines.node))
      .map(([path, entry]) => `${path} wants node ${entry.engines!.node}`);
    expect(refused).toEqual([]);
    // The README says the same version.
    expect(readFileSync(join(ROOT, 'README.md'), 'utf8')).toContain(
      `Node.js ${oldest.replace(/\.0$/, '')} or newer`,
    );
  });

  // npm 11 warns about every install script package.json's allowScripts does not settle: a
  // newcomer's first `npm install` would print a warning to look up. Each one is approved or denied
  // there (with the reason in the README), so a new dependency with a script fails here first.
  it('every locked package with an install script is settled in allowScripts', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
      allowScripts?: Record<string, boolean>;
    };
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8'));
    const withScripts = Object.entries(lock.packages as Record<string, { hasInstallScript?: boolean }>)
      .filter(([path, entry]) => path !== '' && entry.hasInstallScript)
      .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length));
    expect(withScripts.length).toBeGreaterThan(0);
    const unsettled = withScripts.filter((name) => typeof pkg.allowScripts?.[name] !== 'boolean');
    expect(unsettled).toEqual([]);
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    for (const name of withScripts) expect(readme, name).toContain(`\`${name}\``);
  });

  it('every optional platform package a locked package names is in the lock (else npm ci refuses it)', () => {
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8'));
    const packages = lock.packages as Record<string, { optionalDependencies?: Record<string, string> }>;
    const missing: string[] = [];
    for (const [path, entry] of Object.entries(packages)) {
      for (const name of Object.keys(entry.optionalDependencies ?? {})) {
        if (!packages[`node_modules/${name}`] && !packages[`${path}/node_modules/${name}`])
          missing.push(`${name} (wanted by ${path || 'the project'})`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('the postinstall step has nothing to add to the committed lock', () => {
    const dir = mkdtempSync(join(tmpdir(), 'botpay-lock-'));
    try {
      mkdirSync(join(dir, 'bin'));
      copyFileSync(join(ROOT, 'bin/lock-optional.mjs'), join(dir, 'bin/lock-optional.mjs'));
      copyFileSync(join(ROOT, 'package-lock.json'), join(dir, 'package-lock.json'));
      const out = execFileSync(process.execPath, [join(dir, 'bin/lock-optional.mjs')], { encoding: 'utf8' });
      expect(out).toBe('');
      expect(readFileSync(join(dir, 'package-lock.json'), 'utf8')).toBe(
        readFileSync(join(ROOT, 'package-lock.json'), 'utf8'),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('npm ci accepts the committed lock (package.json and lock in sync, every optional platform recorded)', () => {
    // `npm ci --dry-run` checks the lock against package.json without touching node_modules; it is
    // what refused the lock when a platform package's name said amd64 instead of x64.
    const dir = mkdtempSync(join(tmpdir(), 'botpay-ci-'));
    try {
      for (const f of ['package.json', 'package-lock.json']) copyFileSync(join(ROOT, f), join(dir, f));
      mkdirSync(join(dir, 'packages/client'), { recursive: true });
      copyFileSync(join(ROOT, 'packages/client/package.json'), join(dir, 'packages/client/package.json'));
      const result = spawnSync(
        'npm',
        ['ci', '--dry-run', '--ignore-scripts', '--offline', '--no-audit', '--no-fund'],
        { cwd: dir, encoding: 'utf8', timeout: 60_000 },
      );
      expect(
        result.stderr
          .split('\n')
          .filter((l) => l.startsWith('npm error'))
          .join('\n'),
      ).toBe('');
      expect(result.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the example bot keeps its credentials in a git-ignored directory, not where it was started', () => {
    const main = readFileSync(join(ROOT, 'examples/bot/main.ts'), 'utf8');
    expect(main).toContain("new URL('./.state/bot.json', import.meta.url)");
    const ignore = readFileSync(join(ROOT, '.gitignore'), 'utf8').split('\n');
    expect(ignore).toContain('examples/bot/.state/');
    expect(ignore).toContain('profiles*.json');
  });

  it('cookies are signed and parsed by the pinned cookie module', async () => {
    const { default: Fastify } = await import('fastify');
    const { default: cookie } = await import('@fastify/cookie');
    const app = Fastify();
    await app.register(cookie, { secret: 'a-secret-of-enough-length-0123456789' });
    app.get('/set', async (_req, reply) =>
      reply.setCookie('s', 'v 1', { signed: true, httpOnly: true, path: '/' }).send('ok'),
    );
    app.get('/get', async (req) => ({ raw: req.cookies.s, unsigned: req.unsignCookie(req.cookies.s ?? '') }));
    const set = await app.inject({ method: 'GET', url: '/set' });
    const header = String(set.headers['set-cookie']);
    expect(header).toMatch(/^s=v%201\.[^;]+; /);
    expect(header).toContain('; HttpOnly');
    const got = await app.inject({ method: 'GET', url: '/get', headers: { cookie: header.split(';')[0]! } });
    expect(got.json().unsigned).toEqual({ valid: true, renew: false, value: 'v 1' });
    const forged = await app.inject({ method: 'GET', url: '/get', headers: { cookie: 's=v%201.forged' } });
    expect(forged.json().unsigned.valid).toBe(false);
    await app.close();
    expect(
      createRequire(import.meta.url).resolve('cookie', {
        paths: [join(ROOT, 'node_modules/@fastify/cookie')],
      }),
    ).toContain('@fastify/cookie/node_modules/cookie');
  });
});
