import { fileURLToPath } from 'node:url';

// Client-side scripts written in TypeScript (src/dashboard/assets/*.ts) are bundled with esbuild on
// first request and kept in memory: no build step at install or start, and the browser gets one
// small self-contained file.

const cache = new Map<string, Promise<string>>();

export function bundleAsset(name: 'cardWizard' | 'dashboard'): Promise<string> {
  let pending = cache.get(name);
  if (!pending) {
    pending = (async () => {
      const { build } = await import('esbuild');
      const result = await build({
        entryPoints: [fileURLToPath(new URL(`./${name}.ts`, import.meta.url))],
        bundle: true,
        write: false,
        format: 'iife',
        target: 'es2020',
        minify: true,
        legalComments: 'none',
      });
      return result.outputFiles[0]!.text;
    })();
    pending.catch(() => cache.delete(name));
    cache.set(name, pending);
  }
  return pending;
}
