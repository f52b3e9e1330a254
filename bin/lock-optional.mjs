#!/usr/bin/env node
// The package registry reachable here lacks some platform-specific optional packages (for
// example @biomejs/cli-android-arm64), so `npm install` leaves them out of package-lock.json and
// `npm ci` then refuses the lock as out of sync. This adds the missing optional entries with the
// platform they are for, so `npm ci` stays strict and simply skips them on other platforms.
// Runs as the root project's postinstall; idempotent; never fails the install.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';

const OS = [
  'android',
  'darwin',
  'freebsd',
  'linux',
  'netbsd',
  'openbsd',
  'sunos',
  'win32',
  'aix',
  'openharmony',
];
const CPU = ['arm64', 'x64', 'ia32', 'arm', 'ppc64', 's390x', 'riscv64', 'loong64', 'mips64el'];

const file = new URL('../package-lock.json', import.meta.url);
// Installed as a dependency (for example for the tunnel client) there is no lock file: nothing to do.
if (existsSync(file)) fixLock();

function fixLock() {
  try {
    const lock = JSON.parse(readFileSync(file, 'utf8'));
    const packages = lock.packages ?? {};
    let added = 0;
    for (const [path, entry] of Object.entries(packages)) {
      for (const [name, range] of Object.entries(entry.optionalDependencies ?? {})) {
        const key = `node_modules/${name}`;
        const nested = `${path}/node_modules/${name}`;
        if (packages[key] || packages[nested] || !/^\d+\.\d+\.\d+/.test(range)) continue;
        const parts = name.split('/').pop().split('-');
        const os = parts.find((p) => OS.includes(p));
        // Some packages name x64 by its Go/Debian name (e.g. @foundry-rs/anvil-darwin-amd64).
        const cpu = parts.includes('amd64') ? 'x64' : parts.find((p) => CPU.includes(p));
        if (!os || !cpu) continue;
        const libc = parts.includes('musl')
          ? 'musl'
          : parts.includes('gnu') || os === 'linux'
            ? 'glibc'
            : undefined;
        packages[key] = {
          version: range,
          cpu: [cpu],
          ...(entry.dev ? { dev: true } : {}),
          optional: true,
          os: [os],
          ...(libc ? { libc: [libc] } : {}),
        };
        added++;
      }
    }
    if (added > 0) {
      writeFileSync(file, `${JSON.stringify(lock, null, 2)}\n`);
      console.log(
        `lock-optional: recorded ${added} optional platform package(s) the registry does not serve`,
      );
    }
  } catch (error) {
    console.warn(`lock-optional: skipped (${error instanceof Error ? error.message : error})`);
  }
}
