import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPostgres } from '../support/db.ts';
import { childEnv, freePort } from '../support/process.ts';

// The README's walk-through, run as written. Its blocks are fenced as ```sh walkthrough (run in
// order in one bash, like the reader's terminal 2) and ```sh walkthrough-service (started in the
// background, like terminal 1). They run in a fresh directory that looks like a clone after
// `npm install` (bin, src, package.json and node_modules linked in), so the service's ./data and the
// profiles file land there, against a real service process on a free port (the only change to the
// text: localhost:8080 becomes localhost:<port>). Every `# → ` sample line must match what the
// block printed, with `…` standing for anything.

interface Block {
  kind: 'run' | 'service';
  code: string;
  samples: string[];
}

function walkthroughBlocks(markdown: string): Block[] {
  const blocks: Block[] = [];
  const fence = /^```sh (walkthrough|walkthrough-service)\n([\s\S]*?)^```$/gm;
  for (const m of markdown.matchAll(fence)) {
    const code = m[2]!;
    const samples: string[] = [];
    for (const line of code.split('\n')) {
      if (line.startsWith('# →  ')) samples[samples.length - 1] += line.slice(5).trimStart();
      else if (line.startsWith('# → ')) samples.push(line.slice(4));
    }
    blocks.push({ kind: m[1] === 'walkthrough' ? 'run' : 'service', code, samples });
  }
  return blocks;
}

/** A sample line as a pattern: literal text, `…` matches anything. */
function samplePattern(sample: string): RegExp {
  const parts = sample.split('…').map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(parts.join('[\\s\\S]*?'));
}

const ROOT = process.cwd();

// The walk-through uses the embedded database, as a newcomer does: it runs once, in the embedded leg.
describe.runIf(!isPostgres)('README walk-through', () => {
  let dir: string;
  let port: number;
  let blocks: Block[];
  let service: ChildProcess | undefined;
  let serviceOut = '';
  let shell: ChildProcess;
  let shellOut = '';
  let shellErr = '';

  beforeAll(async () => {
    port = await freePort();
    const readme = (await readFile(join(ROOT, 'README.md'), 'utf8')).replaceAll(
      'localhost:8080',
      `localhost:${port}`,
    );
    blocks = walkthroughBlocks(readme);
    dir = await mkdtemp(join(tmpdir(), 'botpay-readme-'));
    for (const name of ['bin', 'src', 'packages', 'node_modules', 'package.json', 'tsconfig.json'])
      await symlink(join(ROOT, name), join(dir, name));
    shell = spawn('bash', ['--noprofile', '--norc'], {
      cwd: dir,
      env: env(),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    shell.stdout?.on('data', (d) => {
      shellOut += String(d);
    });
    shell.stderr?.on('data', (d) => {
      shellErr += String(d);
    });
    // Stop at the first failing command, as a careful reader would.
    shell.stdin?.write('set -eo pipefail\n');
  });

  afterAll(async () => {
    shell?.stdin?.end();
    shell?.kill();
    if (service?.pid) {
      const exited = new Promise((resolve) => service?.once('exit', resolve));
      process.kill(-service.pid, 'SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      if (service.exitCode === null) process.kill(-service.pid, 'SIGKILL');
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  function env(): NodeJS.ProcessEnv {
    // What a fresh terminal has: no database or service settings, only the port moved.
    const base = childEnv({ PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'info' });
    for (const k of Object.keys(base)) {
      if (/^(DATABASE_URL|DATA_DIR|SECRET_KEY|SMTP_URL|BOTPAY_|REGISTRATION_|ALLOW_PRIVATE)/.test(k))
        delete base[k];
    }
    return base;
  }

  /** Runs one block in the long-lived shell and returns what it printed on stdout. */
  async function run(code: string, index: number): Promise<string> {
    const marker = `__README_BLOCK_${index}_DONE__`;
    const start = shellOut.length;
    shell.stdin?.write(`${code}\necho ${marker}\n`);
    const deadline = Date.now() + 60_000;
    while (!shellOut.includes(marker, start)) {
      if (shell.exitCode !== null || Date.now() > deadline) {
        throw new Error(
          `README block ${index} failed (shell exit ${shell.exitCode}):\n${code}\nstdout:\n${shellOut.slice(start)}\nstderr:\n${shellErr}`,
        );
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    return shellOut.slice(start, shellOut.indexOf(marker, start));
  }

  async function startService(code: string): Promise<void> {
    service = spawn('bash', ['--noprofile', '--norc', '-c', code], {
      cwd: dir,
      env: env(),
      detached: true, // its own process group: npm, node and all are stopped together
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    service.stdout?.on('data', (d) => {
      serviceOut += String(d);
    });
    service.stderr?.on('data', (d) => {
      serviceOut += String(d);
    });
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        if ((await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200) break;
      } catch {
        // not listening yet
      }
      if (service.exitCode !== null || Date.now() > deadline)
        throw new Error(`the README's service block did not start:\n${serviceOut}`);
      await new Promise((r) => setTimeout(r, 150));
    }
    // The plain lines are written right after listening; give the pipe a moment.
    const until = Date.now() + 5_000;
    while (!serviceOut.includes('Dashboard:') && Date.now() < until)
      await new Promise((r) => setTimeout(r, 50));
  }

  it('has the blocks of a whole purchase, and none of the commands a fresh machine lacks', () => {
    expect(blocks.filter((b) => b.kind === 'service')).toHaveLength(1);
    expect(blocks.filter((b) => b.kind === 'run').length).toBeGreaterThanOrEqual(8);
    const all = blocks.map((b) => b.code).join('\n');
    expect(all).not.toMatch(/\buuidgen\b|\bjq\b|\bnpx botpay\b/);
    expect(all).toContain('card split');
    expect(all).toContain('/approve');
  });

  it('runs every block as written, and prints what the samples show', async () => {
    let i = 0;
    for (const block of blocks) {
      i++;
      let output: string;
      if (block.kind === 'service') {
        await startService(block.code);
        output = serviceOut;
      } else {
        output = await run(block.code, i);
      }
      for (const sample of block.samples) {
        const pattern = samplePattern(sample);
        if (!pattern.test(output))
          throw new Error(
            `README block ${i}: sample does not match the output\nsample: ${sample}\noutput:\n${output}`,
          );
      }
    }
    // The purchase went through: the last block printed the card digits.
    const last = await run('echo "$CONFIRMATION_ID"; ls profiles.json', 99);
    expect(last).toMatch(/^chk_[a-z0-9]+\nprofiles\.json\n$/);
    const status = await run(
      'curl -s "$BOTPAY_URL/api/v1/bot/merchant/checkout/status?confirmation_id=$CONFIRMATION_ID" -H "authorization: Bearer $API_KEY"',
      100,
    );
    expect(JSON.parse(status)).toMatchObject({
      status: 'approved',
      missing_digits: expect.stringMatching(/^\d{3}$/),
    });
    // The one plain line a newcomer needs, and it is the address whose forms work.
    expect(serviceOut).toContain(`Dashboard: http://localhost:${port}\n`);
    expect(shellErr).not.toMatch(/command not found|No such file/);
  }, 180_000);
});
