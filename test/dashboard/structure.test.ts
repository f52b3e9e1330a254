import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The dashboard's layering, checked on the sources (ARCHITECTURE.md, src/dashboard/): views are
// pure (they import at run time only other views, the html template and pure helpers), page
// handlers run no SQL of their own (they call the area services), every page answers through the
// one renderer, and no two dashboard files import each other in a cycle at run time.

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const dashboard = join(root, 'src/dashboard');

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? tsFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/**
 * Relative imports that exist at run time. `import type …` is erased; with verbatimModuleSyntax an
 * import whose every name is marked `type` is still kept (as a bare import), so it counts.
 */
function runtimeImports(file: string, source = readFileSync(file, 'utf8')): string[] {
  const found: string[] = [];
  for (const m of source.matchAll(/^import\s+(type\s+)?([\s\S]*?)\s*from\s*'([^']+)';/gm)) {
    if (m[1]) continue;
    const target = m[3]!;
    if (target.startsWith('.')) found.push(resolve(dirname(file), target));
  }
  for (const m of source.matchAll(/^import\s+'([^']+)';/gm)) {
    if (m[1]!.startsWith('.')) found.push(resolve(dirname(file), m[1]!));
  }
  return found;
}

const rel = (file: string) => relative(root, file);

/** Every cycle met by a depth-first walk of `edges`, as "a > b > a". */
function findCycles(edges: Map<string, string[]>): string[] {
  const state = new Map<string, 'open' | 'done'>();
  const cycles: string[] = [];
  const visit = (node: string, path: string[]) => {
    if (state.get(node) === 'done') return;
    if (state.get(node) === 'open') {
      cycles.push([...path.slice(path.indexOf(node)), node].join(' > '));
      return;
    }
    state.set(node, 'open');
    for (const next of edges.get(node) ?? []) visit(next, [...path, node]);
    state.set(node, 'done');
  };
  for (const node of edges.keys()) visit(node, []);
  return cycles;
}

describe('dashboard structure', () => {
  it('views import at run time only views, the html template and pure helpers', () => {
    const allowed = new Set(
      [
        'src/dashboard/html.ts',
        'src/platform/money.ts',
        // A check in place of `!`: no imports of its own.
        'src/platform/present.ts',
        // No Node imports: it is bundled into the browser's card wizard too.
        'src/cards/split.ts',
      ].map((f) => join(root, f)),
    );
    const views = tsFiles(join(dashboard, 'views'));
    expect(views.length).toBeGreaterThan(5);
    for (const view of views) {
      for (const target of runtimeImports(view)) {
        const ok = allowed.has(target) || target.startsWith(`${join(dashboard, 'views')}/`);
        expect(ok, `${rel(view)} imports ${rel(target)}`).toBe(true);
      }
      const source = readFileSync(view, 'utf8');
      expect(source, rel(view)).not.toMatch(/ctx\.db|\.query\(|maybeOne\(|FastifyRe(ply|quest)/);
    }
  });

  it('page handlers run no SQL and answer HTML only through reply.page', () => {
    const pages = readdirSync(dashboard).filter((f) => f.endsWith('Pages.ts'));
    expect(pages.length).toBeGreaterThan(8);
    for (const page of pages) {
      const source = readFileSync(join(dashboard, page), 'utf8');
      expect(source, page).not.toMatch(
        /\.query\(|maybeOne\(|\.transaction\(|\bSELECT\b|\bUPDATE\b|\bINSERT\b/,
      );
      expect(source, page).not.toMatch(/text\/html/);
    }
  });

  it('no dashboard file is part of a run-time import cycle', () => {
    const files = tsFiles(dashboard);
    const edges = new Map(
      files.map((f) => [
        rel(f),
        runtimeImports(f)
          .filter((t) => t.startsWith(dashboard))
          .map(rel),
      ]),
    );
    expect(findCycles(edges)).toEqual([]);
  });

  it('the checks themselves see type-only imports, kept imports and cycles', () => {
    const file = join(dashboard, 'x.ts');
    const source = [
      "import type { A } from './a.ts';",
      "import { type B } from './b.ts';",
      "import {\n  c,\n  type D,\n} from './views/c.ts';",
      "import './d.ts';",
      "import { e } from 'node:fs';",
    ].join('\n');
    expect(runtimeImports(file, source).map(rel)).toEqual([
      'src/dashboard/b.ts',
      'src/dashboard/views/c.ts',
      'src/dashboard/d.ts',
    ]);
    // The cycle this split removed: routes.ts imported approvalPages.ts, which imported routes.ts.
    const before = new Map([
      ['routes.ts', ['approvalPages.ts', 'http.ts']],
      ['approvalPages.ts', ['routes.ts']],
      ['http.ts', []],
    ]);
    expect(findCycles(before)).toEqual(['routes.ts > approvalPages.ts > routes.ts']);
  });
});
