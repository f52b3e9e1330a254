import {
  appendFileSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { build, checkBuild, compiledEntry } from '../../bin/compiled.mjs';
import { type ServiceProcess, startServiceProcess } from '../support/process.ts';

// `npm install` compiles the service into dist/ (bin/build.mjs) and bin/botpay.mjs runs that build
// only while every source it was made from is unchanged; otherwise it rebuilds, and when it cannot,
// runs the sources through tsx.

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});
const tempDir = (prefix: string) => {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(dir);
  return dir;
};

/** A small project of the same shape: src/cli.ts exports main and reads a file beside a source. */
function fakeProject(): { root: string; distDir: string } {
  const root = tempDir('botpay-compiled-');
  mkdirSync(join(root, 'src', 'lib'), { recursive: true });
  writeFileSync(
    join(root, 'src', 'cli.ts'),
    "import { greeting } from './lib/greeting.ts';\nexport async function main(): Promise<string> {\n  return greeting();\n}\n",
  );
  writeFileSync(
    join(root, 'src', 'lib', 'greeting.ts'),
    "import { readFileSync } from 'node:fs';\nexport const greeting = (): string => readFileSync(new URL('./word.txt', import.meta.url), 'utf8').trim() + '!';\n",
  );
  writeFileSync(join(root, 'src', 'lib', 'word.txt'), 'hello\n');
  return { root, distDir: join(root, 'dist') };
}

async function run(entry: string): Promise<string> {
  const mod = (await import(entry)) as { main(): Promise<string> };
  return mod.main();
}

describe('compiled start (bin/compiled.mjs)', () => {
  it('a build is current until a source changes, and import.meta.url still names the source file', async () => {
    const project = fakeProject();
    expect(checkBuild(project)).toEqual({ stale: 'no build yet' });
    await build(project);
    const current = checkBuild(project);
    if (!('entry' in current)) throw new Error(`expected a current build: ${current.stale}`);
    // Read beside src/lib/greeting.ts although the code runs from dist/.
    expect(await run(current.entry)).toBe('hello!');

    // An edit that keeps the size still moves the modification time.
    const file = join(project.root, 'src', 'lib', 'greeting.ts');
    const later = new Date(Date.now() + 5_000);
    utimesSync(file, later, later);
    expect(checkBuild(project)).toEqual({ stale: 'src/lib/greeting.ts changed' });
  });

  it('a stale build is rebuilt before it runs, so edited sources never run stale', async () => {
    const project = fakeProject();
    await build(project);
    appendFileSync(join(project.root, 'src', 'cli.ts'), 'export const edited = true;\n');
    writeFileSync(
      join(project.root, 'src', 'lib', 'greeting.ts'),
      "export const greeting = (): string => 'edited';\n",
    );
    const next = await compiledEntry(project);
    if (!('entry' in next)) throw new Error(`expected a rebuild: ${next.fallback}`);
    expect(next.rebuilt).toMatch(/changed$/);
    expect(await run(next.entry)).toBe('edited');
    expect('entry' in checkBuild(project)).toBe(true);
  });

  it('a removed source makes the build stale', async () => {
    const project = fakeProject();
    await build(project);
    unlinkSync(join(project.root, 'src', 'lib', 'greeting.ts'));
    expect(checkBuild(project)).toEqual({ stale: 'src/lib/greeting.ts was removed' });
  });

  it('a build that fails falls back to the sources with the reason (a syntax error, an unwritable dist)', async () => {
    const project = fakeProject();
    writeFileSync(join(project.root, 'src', 'lib', 'greeting.ts'), 'export const greeting = ( =>;\n');
    const broken = await compiledEntry(project);
    expect(broken).toEqual({
      fallback: expect.stringMatching(/^no build yet; rebuilding failed: .*greeting\.ts/),
    });

    const other = fakeProject();
    const file = join(other.root, 'not-a-directory');
    writeFileSync(file, '');
    const unwritable = await compiledEntry({ root: other.root, distDir: join(file, 'dist') });
    expect(unwritable).toEqual({ fallback: expect.stringMatching(/^no build yet; rebuilding failed: /) });
  });
});

// A start through tsx takes tens of seconds on a loaded 2-core machine.
describe('botpay serve', { timeout: 120_000 }, () => {
  const services: ServiceProcess[] = [];
  afterAll(async () => {
    for (const service of services) {
      service.child.kill('SIGTERM');
      await service.exited;
    }
  });

  it('runs the compiled build and answers /healthz', async () => {
    // Inside the project: the bundle imports its packages from the project's node_modules.
    mkdirSync('test-artifacts', { recursive: true });
    const distDir = mkdtempSync(join(process.cwd(), 'test-artifacts', 'dist-'));
    dirs.push(distDir);
    await build({ distDir });
    const service = await startServiceProcess({
      DATA_DIR: tempDir('botpay-data-'),
      BOTPAY_DIST_DIR: distDir,
      LOG_LEVEL: 'info',
    });
    services.push(service);
    expect((await fetch(`${service.url}/healthz`)).status).toBe(200);
    expect(service.output()).toContain('"runtime":"compiled"');
    expect(service.output()).not.toContain('through tsx');
  });

  it('runs the sources through tsx, with a one-line notice, when no build can be made', async () => {
    const file = join(tempDir('botpay-nodist-'), 'file');
    writeFileSync(file, '');
    const service = await startServiceProcess({
      DATA_DIR: tempDir('botpay-data-'),
      BOTPAY_DIST_DIR: join(file, 'dist'),
      LOG_LEVEL: 'info',
    });
    services.push(service);
    expect((await fetch(`${service.url}/healthz`)).status).toBe(200);
    expect(service.output()).toContain('"runtime":"tsx"');
    expect(service.output()).toMatch(
      /^botpay: running the TypeScript sources through tsx \(no build yet; rebuilding failed: .+\)$/m,
    );
  });
});
