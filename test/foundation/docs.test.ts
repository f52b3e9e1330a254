import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from '../support/service.ts';

// A clone must be readable on its own: no file points at design papers that live outside the
// repository, every relative link in the Markdown resolves to a file of the repository, and the
// API reference (docs/api.md) names every bot and owner route the service serves.

const ROOT = process.cwd();
const SKIP_DIRS = new Set(['node_modules', '.git', 'data', 'test-artifacts', 'dist', 'coverage']);
const TEXT = /\.(ts|mts|mjs|js|md|sql|json|yaml|yml|html|css|sh|txt)$|^(Dockerfile|\.gitignore)$/;

function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    if (SKIP_DIRS.has(name)) continue;
    const path = join(dir, name);
    const st = statSync(path);
    if (st.isDirectory()) walk(path, out);
    else if (TEXT.test(name) && name !== 'package-lock.json') out.push(path);
  }
  return out;
}

const files = walk(ROOT);
const rel = (f: string) => relative(ROOT, f);

// Spelled in pieces so that this file does not match itself.
const FORBIDDEN = [
  new RegExp(['SPEC', '\\.md'].join('')),
  new RegExp(['DESIGN', '\\.md'].join('')),
  new RegExp(['STYLE', '\\.md'].join('')),
  new RegExp(['\\.\\./', 'shared'].join('')),
  new RegExp(['/work/', 'shared'].join('')),
  new RegExp(['\\bSPEC', ' §'].join('')),
  new RegExp(['\\bDESIGN', ' §'].join('')),
];
// Applied migrations are never edited (forward-only); this one predates the rule and keeps a comment.
const FROZEN = new Set(['src/migrations/0002_checkout.sql']);

describe('documentation stays inside the repository', () => {
  it('no file refers to design papers a clone does not have', () => {
    const hits: string[] = [];
    for (const file of files) {
      if (FROZEN.has(rel(file))) continue;
      const lines = readFileSync(file, 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (FORBIDDEN.some((re) => re.test(line))) hits.push(`${rel(file)}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(hits).toEqual([]);
  });

  it('every relative Markdown link points at a file or directory in the repository', () => {
    const broken: string[] = [];
    const markdown = files.filter((f) => f.endsWith('.md'));
    expect(markdown.map(rel)).toContain('docs/api.md');
    for (const file of markdown) {
      const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
      const targets = [
        ...[...text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]!),
        ...[...text.matchAll(/^\[[^\]]+\]:\s*(\S+)/gm)].map((m) => m[1]!),
      ];
      for (const target of targets) {
        if (/^(https?:|mailto:|#)/.test(target)) continue;
        const path = decodeURIComponent(target.split('#')[0]!);
        const abs = path.startsWith('/') ? join(ROOT, path) : resolve(dirname(file), path);
        if (!abs.startsWith(`${ROOT}/`) && abs !== ROOT)
          broken.push(`${rel(file)}: ${target} (outside the repository)`);
        else if (!existsSync(abs)) broken.push(`${rel(file)}: ${target} (no such file)`);
      }
    }
    expect(broken).toEqual([]);
  });
});

describe('docs/api.md covers the API', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('names every bot and owner route of the OpenAPI document', async () => {
    const doc = (await svc.app.inject({ method: 'GET', url: '/openapi.json' })).json() as {
      paths: Record<string, Record<string, unknown>>;
    };
    const reference = readFileSync(join(ROOT, 'docs/api.md'), 'utf8');
    const missing: string[] = [];
    let count = 0;
    for (const [path, ops] of Object.entries(doc.paths)) {
      if (!path.startsWith('/api/v1/')) continue;
      for (const method of Object.keys(ops)) {
        count++;
        const route = `${method.toUpperCase()} ${path}`;
        if (!reference.includes(route)) missing.push(route);
      }
    }
    expect(count).toBeGreaterThan(30);
    expect(missing, missing.join('\n')).toEqual([]);
  });
});
