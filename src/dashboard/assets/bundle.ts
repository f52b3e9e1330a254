import { fileURLToPath } from 'node:url';

// The dashboard's static files are real files beside this one, built with esbuild on first request
// and kept in memory: no build step at install or start, the browser gets one small self-contained
// file, and the linter and formatter see the sources. Scripts are written in TypeScript
// (`<name>.ts`, bundled as an IIFE), the stylesheet is `dashboard.css` (minified).

export type AssetName = 'cardWizard' | 'countdown' | 'dashboard' | 'dashboard.css';

const cache = new Map<AssetName, Promise<string>>();

export function bundleAsset(name: AssetName): Promise<string> {
  let pending = cache.get(name);
  if (!pending) {
    pending = (async () => {
      const { build } = await import('esbuild');
      const css = name.endsWith('.css');
      const result = await build({
        entryPoints: [fileURLToPath(new URL(css ? `./${name}` : `./${name}.ts`, import.meta.url))],
        bundle: true,
        write: false,
        ...(css ? {} : { format: 'iife' as const, target: 'es2020' }),
        minify: true,
        legalComments: 'none',
      });
      const [output] = result.outputFiles;
      if (!output) throw new Error(`esbuild wrote no output for the asset ${name}`);
      return output.text;
    })();
    pending.catch(() => cache.delete(name));
    cache.set(name, pending);
  }
  return pending;
}
