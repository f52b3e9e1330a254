import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

// The two rails meet only in the spending core (src/spend/): the card checkout (src/checkout/) and
// the partner wallet (src/x402/) import nothing of each other, not even a type, so a money rule
// shared by both has one home. madge (.ci/run) sees runtime cycles only; this reads every import,
// `import type` and `import()` included.

async function sources(dir: string): Promise<Array<{ file: string; imports: string[] }>> {
  const out: Array<{ file: string; imports: string[] }> = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts')) continue;
    const file = join(entry.parentPath, entry.name);
    const text = await readFile(file, 'utf8');
    const imports = [...text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)['"]([^'"]+)['"]/g)].map(
      (m) => m[1] as string,
    );
    out.push({ file, imports });
  }
  return out;
}

const crossing = (files: Array<{ file: string; imports: string[] }>, folder: string) =>
  files.flatMap((f) => f.imports.filter((i) => i.includes(`/${folder}/`)).map((i) => `${f.file} → ${i}`));

describe('module boundaries', () => {
  it('src/checkout and src/x402 import nothing of each other', async () => {
    expect(crossing(await sources('src/checkout'), 'x402')).toEqual([]);
    expect(crossing(await sources('src/x402'), 'checkout')).toEqual([]);
  });

  it('the spending core reaches the rails only through the table of hold settlements', async () => {
    const spend = await sources('src/spend');
    const rails = [...crossing(spend, 'checkout'), ...crossing(spend, 'x402')];
    expect(rails.sort()).toEqual(
      [
        'src/spend/holds.ts → ../checkout/holds.ts',
        'src/spend/holds.ts → ../checkout/taskLink.ts',
        'src/spend/holds.ts → ../x402/service.ts',
      ].sort(),
    );
  });
});
