// Types of bin/compiled.mjs (plain JavaScript: it runs before anything can compile TypeScript).
export interface BuildOptions {
  /** The project's root (default: this package). */
  root?: string;
  /** Where builds go (default: BOTPAY_DIST_DIR, else <root>/dist). */
  distDir?: string;
}
export const DEFAULT_ROOT: string;
export function checkBuild(options?: BuildOptions): { entry: string } | { stale: string };
export function build(options?: BuildOptions): Promise<{ entry: string; seconds: number }>;
export function compiledEntry(
  options?: BuildOptions,
): Promise<{ entry: string; rebuilt?: string } | { fallback: string }>;
export function firstLine(error: unknown): string;
