import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, join, posix } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { parseConfig } from '../../src/config.ts';
import { freePort } from '../support/process.ts';
import { until } from '../support/wait.ts';

// The container path without a Docker daemon (there is none here, nor in CI). What is verified:
//  1. The Dockerfile passes the Dockerfile linter of the VS Code language service (dockerfile-utils).
//  2. Its steps are replayed in a clean directory: the build context is what a clean clone holds
//     (`git ls-files`) minus .dockerignore; WORKDIR, ENV, COPY and RUN are done as Docker does them,
//     RUN with the same command lines (`npm ci --omit=dev …`, on a hard-linked copy of the npm cache
//     so its `npm cache clean --force` does not empty the developer's); USER is honoured by running
//     CMD as an unprivileged user when the test runs as root (CI does), with the data directory its
//     own and the application directory not writable — as in the image.
//  3. CMD starts the service from that layout alone (production dependencies, no dev tools, no
//     files outside the image) on the embedded database; the HEALTHCHECK command itself must pass;
//     a bot registers; the dashboard's bundled script and /skill.md are served; STOPSIGNAL ends it
//     cleanly.
//  4. compose.yaml's service environments are valid configuration, and the Caddyfile routes to
//     services that exist.
// What is not verified here: the base image itself (its Node version is checked against `engines`
// by tag only), Docker's layer cache, the PostgreSQL container and Caddy — see docs/deploy.md's
// smoke test, run by hand where Docker is available.

const ROOT = process.cwd();
const isPostgres = process.env.TEST_DB === 'postgres';

interface Instruction {
  keyword: string;
  args: string;
}

/** Dockerfile instructions (comments dropped, backslash continuations joined). */
function instructions(text: string): Instruction[] {
  const out: Instruction[] = [];
  const joined = text.replace(/\\\r?\n/g, ' ');
  for (const raw of joined.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const m = /^(\S+)\s+(.*)$/.exec(line);
    if (!m) throw new Error(`cannot read Dockerfile line: ${line}`);
    out.push({ keyword: m[1]!.toUpperCase(), args: m[2]!.trim() });
  }
  return out;
}

/** `["a","b"]` (exec form) or words (shell form, which this Dockerfile does not use for CMD). */
function execForm(args: string): string[] {
  const parsed = JSON.parse(args) as unknown;
  if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === 'string'))
    throw new Error(`expected exec form: ${args}`);
  return parsed;
}

/** ENV a=b c="d e" (the key=value form), with $VAR references to earlier ENV values expanded. */
function envPairs(args: string, env: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  const re = /([A-Za-z_][A-Za-z0-9_]*)=("([^"]*)"|(\S*))/g;
  for (const m of args.matchAll(re)) {
    const value = m[3] ?? m[4] ?? '';
    out[m[1]!] = value.replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (_, name: string) => env[name] ?? '');
  }
  if (Object.keys(out).length === 0) throw new Error(`ENV without key=value pairs: ${args}`);
  return out;
}

/** The build context: files of a clean clone, minus .dockerignore (plain names and folders only). */
function buildContext(): Set<string> {
  const ignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  for (const p of ignore) {
    // A pattern this replay does not understand must fail loudly rather than be half-honoured.
    if (/[*?[\]!]/.test(p)) throw new Error(`.dockerignore pattern not supported by this check: ${p}`);
  }
  const files = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' })
    .split('\0')
    .filter(Boolean);
  const ignored = (f: string) =>
    ignore.some((p) => f === p.replace(/\/$/, '') || f.startsWith(`${p.replace(/\/$/, '')}/`));
  return new Set(files.filter((f) => !ignored(f) && existsSync(join(ROOT, f))));
}

/** COPY <src>... <dest> from the context into the image root, as Docker does for files and folders. */
function copyFromContext(context: Set<string>, args: string, workdir: string, imageRoot: string): string[] {
  const parts = args.split(/\s+/);
  if (parts.some((p) => p.startsWith('--'))) throw new Error(`COPY flags are not replayed: ${args}`);
  const dest = parts.pop()!;
  const destAbs = posix.resolve(workdir, dest);
  const copied: string[] = [];
  for (const src of parts) {
    const clean = src.replace(/^\.\//, '').replace(/\/$/, '');
    const underDir = [...context].filter((f) => f.startsWith(`${clean}/`));
    if (context.has(clean)) {
      const target = dest.endsWith('/') || parts.length > 1 ? posix.join(destAbs, basename(clean)) : destAbs;
      mkdirSync(join(imageRoot, dirname(target)), { recursive: true });
      cpSync(join(ROOT, clean), join(imageRoot, target));
      copied.push(target);
    } else if (underDir.length > 0) {
      for (const f of underDir) {
        const target = posix.join(destAbs, f.slice(clean.length + 1));
        mkdirSync(join(imageRoot, dirname(target)), { recursive: true });
        cpSync(join(ROOT, f), join(imageRoot, target));
        copied.push(target);
      }
    } else {
      throw new Error(`COPY source not in the build context (not committed, or .dockerignore'd): ${src}`);
    }
  }
  return copied;
}

const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');

describe('Dockerfile', () => {
  it('passes the Dockerfile linter', () => {
    const { validate } = createRequire(import.meta.url)('dockerfile-utils') as {
      validate(content: string): Array<{ message: string; range: { start: { line: number } } }>;
    };
    const problems = validate(dockerfile).map((d) => `line ${d.range.start.line + 1}: ${d.message}`);
    expect(problems).toEqual([]);
  });

  it('uses a Node base image the project supports', () => {
    const from = instructions(dockerfile).find((i) => i.keyword === 'FROM')!.args;
    const major = /^node:(\d+)/.exec(from)?.[1];
    const engines = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).engines.node as string;
    const oldestMajor = /(\d+)/.exec(engines)?.[1];
    expect(major).toBeDefined();
    expect(Number(major)).toBeGreaterThanOrEqual(Number(oldestMajor));
  });
});

// One replayed image per run: the install takes a while, so it is built once in beforeAll.
describe.skipIf(isPostgres)('the image layout, built from the Dockerfile without Docker', () => {
  const base = mkdtempSync(join(tmpdir(), 'botpay-image-'));
  const imageRoot = join(base, 'root');
  const dataDir = join(base, 'data');
  let workdir = '/';
  let env: Record<string, string> = {};
  let user = 'root';
  let cmd: string[] = [];
  let healthcheck: string[] = [];
  let stopSignal: NodeJS.Signals = 'SIGTERM';
  let exposed = 0;
  let service: ChildProcess | undefined;
  let output = '';
  const asRoot = process.getuid?.() === 0;

  const dockerEnvOf = (extra: Record<string, string>) => ({
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: join(base, 'home'),
    ...env,
    ...extra,
  });

  beforeAll(() => {
    chmodSync(base, 0o755);
    mkdirSync(imageRoot, { recursive: true });
    mkdirSync(join(base, 'home'), { recursive: true });
    // A hard-linked copy of the npm cache: `npm cache clean --force` in the RUN line empties this
    // copy, not the developer's cache, and the install needs no download when the cache is warm.
    const npmCache = join(base, 'npm-cache');
    const realCache = join(process.env.HOME ?? '/root', '.npm', '_cacache');
    if (existsSync(realCache)) {
      mkdirSync(npmCache, { recursive: true });
      spawnSync('cp', ['-al', realCache, join(npmCache, '_cacache')]);
    }
    const context = buildContext();
    for (const ins of instructions(dockerfile)) {
      switch (ins.keyword) {
        case 'FROM':
        case 'LABEL':
          break;
        case 'WORKDIR':
          workdir = posix.resolve(workdir, ins.args);
          mkdirSync(join(imageRoot, workdir), { recursive: true });
          break;
        case 'ENV':
          env = { ...env, ...envPairs(ins.args, env) };
          break;
        case 'COPY':
          copyFromContext(context, ins.args, workdir, imageRoot);
          break;
        case 'RUN': {
          // Paths in the command that name the image's root (mkdir -p /data) are mapped into it;
          // chown to the image's user is replayed below with the real uid.
          const line = ins.args
            .replace(/(^|\s)\/data\b/g, `$1${join(imageRoot, 'data')}`)
            .replace(/chown \S+ /, 'true ');
          const r = spawnSync('sh', ['-c', line], {
            cwd: join(imageRoot, workdir),
            env: { ...dockerEnvOf({}), npm_config_cache: npmCache, npm_config_prefer_offline: 'true' },
            encoding: 'utf8',
            timeout: 240_000,
          });
          if (r.status !== 0)
            throw new Error(`RUN ${ins.args} failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
          break;
        }
        case 'USER':
          user = ins.args;
          break;
        case 'VOLUME':
        case 'EXPOSE':
          if (ins.keyword === 'EXPOSE') exposed = Number.parseInt(ins.args, 10);
          break;
        case 'HEALTHCHECK': {
          const m = /CMD\s+(.*)$/.exec(ins.args);
          if (!m) throw new Error(`HEALTHCHECK without CMD: ${ins.args}`);
          healthcheck = m[1]!.trim().startsWith('[') ? execForm(m[1]!) : ['sh', '-c', m[1]!];
          break;
        }
        case 'STOPSIGNAL':
          stopSignal = ins.args as NodeJS.Signals;
          break;
        case 'CMD':
          cmd = execForm(ins.args);
          break;
        default:
          throw new Error(`Dockerfile instruction not replayed by this check: ${ins.keyword}`);
      }
    }
    // The volume the service writes to, owned by the unprivileged user as `chown node:node /data` does.
    mkdirSync(dataDir, { recursive: true });
    if (asRoot) {
      chownSync(dataDir, 65534, 65534);
      // The application directory stays root's and read-only for the service, as in the image.
      spawnSync('chmod', ['-R', 'a+rX,go-w', imageRoot]);
    }
  }, 300_000);

  afterAll(async () => {
    if (service && service.exitCode === null) {
      service.kill('SIGKILL');
      await new Promise((r) => service?.once('exit', r));
    }
    // The replayed image holds a whole node_modules: removing it can take a while on a busy machine.
    rmSync(base, { recursive: true, force: true });
  }, 180_000);

  it('has the runtime files and nothing of the development tree', () => {
    const app = join(imageRoot, workdir);
    expect(user).toBe('node');
    expect(exposed).toBe(Number(env.PORT));
    for (const f of [
      'package.json',
      'bin/botpay.mjs',
      'src/server.ts',
      'docs/skill.md',
      'node_modules/fastify',
    ]) {
      expect(existsSync(join(app, f)), f).toBe(true);
    }
    for (const f of [
      'test',
      'bench',
      '.git',
      'node_modules/vitest',
      'node_modules/@biomejs',
      'node_modules/playwright-core',
      'data',
    ]) {
      expect(existsSync(join(app, f)), f).toBe(false);
    }
    // Every migration the source tree has is in the image.
    expect(readdirSync(join(app, 'src/migrations')).sort()).toEqual(
      readdirSync(join(ROOT, 'src/migrations')).sort(),
    );
    expect(statSync(join(app, 'src/server.ts')).isFile()).toBe(true);
  });

  it('CMD serves from that layout as an unprivileged user, passes its HEALTHCHECK and stops on STOPSIGNAL', async () => {
    const port = await freePort();
    const runEnv = dockerEnvOf({
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      SECRET_KEY: 'ab'.repeat(32),
      BASE_URL: `http://127.0.0.1:${port}`,
      LOG_LEVEL: 'warn',
    });
    const [file, ...args] = cmd;
    const argv = asRoot ? ['--reuid=65534', '--regid=65534', '--clear-groups', '--', file!, ...args] : args;
    service = spawn(asRoot ? 'setpriv' : file!, asRoot ? argv : args, {
      cwd: join(imageRoot, workdir),
      env: runEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    service.stdout?.on('data', (d) => {
      output += d;
    });
    service.stderr?.on('data', (d) => {
      output += d;
    });
    const health = () =>
      spawnSync(healthcheck[0]!, healthcheck.slice(1), { env: runEnv, timeout: 5_000 }).status === 0;
    await until(() => {
      if (service?.exitCode !== null) throw new Error(`the service exited:\n${output}`);
      return health();
    }, 90_000);

    const baseUrl = `http://127.0.0.1:${port}`;
    const reg = await fetch(`${baseUrl}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ bot_name: 'container-bot', owner_email: 'owner@example.com' }),
    });
    expect(reg.status, await reg.clone().text()).toBe(201);
    expect(((await reg.json()) as { api_key?: string }).api_key).toMatch(/.+/);
    expect((await fetch(`${baseUrl}/skill.md`)).status).toBe(200);
    const script = await fetch(`${baseUrl}/assets/card-wizard.js`);
    expect(script.status).toBe(200);
    expect((await script.text()).length).toBeGreaterThan(1000);
    // The service wrote its database into the volume, not into the application directory.
    expect(readdirSync(dataDir).length).toBeGreaterThan(0);

    service.kill(stopSignal);
    const code = await new Promise<number | null>((resolve) => service?.once('exit', (c) => resolve(c)));
    expect(code, output).toBe(0);
  }, 150_000);
});

describe('compose.yaml', () => {
  const compose = parseYaml(readFileSync(join(ROOT, 'compose.yaml'), 'utf8'), { merge: true }) as {
    services: Record<string, { build?: string; image?: string; environment?: Record<string, string> }>;
  };

  /** ${VAR:-default} and ${VAR:?message} as compose substitutes them, with the given variables set. */
  const substitute = (value: string, vars: Record<string, string>) =>
    String(value).replace(
      /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-?])([^}]*))?\}/g,
      (_, name: string, op?: string, arg?: string) => {
        if (vars[name]) return vars[name]!;
        if (op === '?') throw new Error(`compose needs ${name}: ${arg}`);
        return op === '-' ? (arg ?? '') : '';
      },
    );

  it('every service built from the Dockerfile has a valid configuration', () => {
    const built = Object.entries(compose.services).filter(([, s]) => s.build !== undefined);
    expect(built.length).toBeGreaterThanOrEqual(2);
    for (const [name, svc] of built) {
      const env = Object.fromEntries(
        Object.entries(svc.environment ?? {}).map(([k, v]) => [
          k,
          substitute(v, { SECRET_KEY: 'cd'.repeat(32) }),
        ]),
      );
      expect(() => parseConfig({ ...env, PORT: '8080', DATA_DIR: '/data' }), name).not.toThrow();
    }
  });

  it('refuses to start without SECRET_KEY, as its comment says', () => {
    const svc = Object.values(compose.services).find((s) => s.build !== undefined)!;
    expect(() => substitute(svc.environment?.SECRET_KEY ?? '', {})).toThrow(/SECRET_KEY/);
  });

  it('the proxy routes only to services that exist', () => {
    const caddy = readFileSync(join(ROOT, 'deploy/Caddyfile'), 'utf8');
    const upstreams = [...caddy.matchAll(/reverse_proxy\s+([^{\n]+)/g)].flatMap((m) =>
      m[1]!.trim().split(/\s+/),
    );
    expect(upstreams.length).toBeGreaterThan(0);
    for (const u of upstreams) expect(Object.keys(compose.services), u).toContain(u.split(':')[0]);
  });
});
