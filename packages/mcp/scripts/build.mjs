// Builds the published package: dist/bin.js, one ES module bundled by esbuild from src/bin.ts.
//   npm run build -w packages/mcp     (npm pack runs it through prepack)
// In the repository the sources import the SDK's sources (../../client/src/index.ts), as the
// service does; in the bundle that import is the @botpay/client dependency, and the MCP SDK and
// Ajv stay dependencies too. Anything else from outside src/ — the service's code above all —
// fails the build: the package runs without the service's source.
import { rmSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'src');
const clientEntry = join(root, '../client/src/index.ts');
const DEPENDENCIES = ['@botpay/client', '@modelcontextprotocol/sdk', 'ajv'];

/** @type {import('esbuild').Plugin} */
const boundaries = {
  name: 'package-boundaries',
  setup(b) {
    b.onResolve({ filter: /.*/ }, (args) => {
      if (args.kind === 'entry-point') return undefined;
      if (!args.path.startsWith('.')) {
        const name = args.path.startsWith('@')
          ? args.path.split('/').slice(0, 2).join('/')
          : args.path.split('/')[0];
        if (DEPENDENCIES.includes(name) || args.path.startsWith('node:'))
          return { path: args.path, external: true };
        return { errors: [{ text: `${args.path}: not a dependency of @botpay/mcp` }] };
      }
      const target = join(args.resolveDir, args.path);
      if (target === clientEntry) return { path: '@botpay/client', external: true };
      if (!target.startsWith(src + sep)) {
        return {
          errors: [
            {
              text: `${relative(root, target)}: outside packages/mcp/src (the package ships without the service)`,
            },
          ],
        };
      }
      return undefined;
    });
  },
};

rmSync(join(root, 'dist'), { recursive: true, force: true });
await build({
  entryPoints: [join(src, 'bin.ts')],
  outfile: join(root, 'dist/bin.js'),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  sourcemap: true,
  sourcesContent: true,
  legalComments: 'none',
  plugins: [boundaries],
  logLevel: 'warning',
});
