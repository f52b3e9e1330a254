import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';
import { describe, it } from 'vitest';

// The browser suites' one way to find and start Chromium (Debian's `chromium`, driven by
// playwright-core). CHROMIUM_PATH only to point at another build, or to check the missing-browser
// behaviour: without a browser the suites are skipped on a developer's machine, and in CI (CI=true)
// each one fails with a line saying what to install, so a CI machine without Chromium cannot pass
// by skipping them.

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const haveChromium = existsSync(CHROMIUM);

/** Call at the top of a browser suite's file, with the suite's name. */
export function requireChromiumInCi(suite: string): void {
  if (haveChromium || process.env.CI !== 'true') return;
  describe(suite, () => {
    it('needs chromium', () => {
      throw new Error(
        `Chromium is not installed at ${CHROMIUM}; CI must install it (apt-get install chromium).`,
      );
    });
  });
}

/** Headless Chromium without the network chatter a test does not want (updates, sync, QUIC). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
