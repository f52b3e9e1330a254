import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveChromium, launchChromium, requireChromiumInCi } from '../support/browser.ts';
import { createOwnerToken, findOrCreateOwner } from '../../src/owners/auth.ts';
import { createLogger } from '../../src/platform/logger.ts';
import { createMailer } from '../../src/platform/mailer.ts';
import { type Service, startService } from '../../src/server.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { freePort } from '../support/process.ts';
import { testConfig } from '../support/service.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';

// Issue 15 items 3 and 4 in a real browser (Debian Chromium through playwright-core): a newcomer
// with BASE_URL=http://localhost:PORT opens the address the socket log shows (127.0.0.1:PORT),
// signs in with the link the development mailer prints as one line (no SMTP server: the mailer's
// own development path is what is tested), then creates an owner token on the Settings page:
// shown once, gone on reload, revocable. Screenshots go to test-artifacts/screenshots.

const SHOTS = join(process.cwd(), 'test-artifacts', 'screenshots');

requireChromiumInCi('first contact in a browser');

describe.skipIf(!haveChromium)('first contact in a browser', () => {
  let database: TestDatabase;
  let service: Service;
  let browser: Browser;
  let page: Page;
  let port: number;
  let printed = '';

  beforeAll(async () => {
    await mkdir(SHOTS, { recursive: true });
    database = await createTestDatabase();
    port = await freePort();
    const config = testConfig({
      BASE_URL: `http://localhost:${port}`,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
    });
    const terminal = new Writable({
      write(chunk, _e, done) {
        printed += String(chunk);
        done();
      },
    });
    const logger = createLogger('silent');
    const mailer = createMailer({
      smtpUrl: undefined,
      from: config.mailFrom,
      logger,
      noticeStream: terminal,
    });
    service = await startService(config, { db: database.db, mailer, jobs: [] });
    browser = await launchChromium();
    page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  });

  afterAll(async () => {
    await browser?.close();
    await service?.close();
    await database?.drop();
  });

  async function signInLine(email: string): Promise<string> {
    for (let i = 0; i < 100; i++) {
      const line = printed.split('\n').find((l) => l.startsWith(`Sign-in link for ${email} `));
      if (line) return line;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`no sign-in line printed; got:\n${printed}`);
  }

  it('signs in from 127.0.0.1 with the printed link, then creates, sees once and revokes a token', async () => {
    const base = `http://localhost:${port}`;
    await page.goto(`http://127.0.0.1:${port}/`);
    expect(page.url()).toBe(`${base}/signin`);
    await page.getByLabel('E-mail address').fill('newcomer@example.com');
    await page.getByRole('button', { name: 'Send me a sign-in link' }).click();
    await page.waitForURL(/\/signin\/check-email/);
    const line = await signInLine('newcomer@example.com');
    const link = line.slice(line.indexOf(base));
    expect(link).toMatch(new RegExp(`^${base}/signin/verify\\?token=[0-9a-f]{64}$`));
    await page.goto(link);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${base}/`);

    await page.getByRole('link', { name: 'Settings' }).click();
    await page.waitForURL(`${base}/settings`);
    await page.getByLabel('Name of a new token').fill('laptop');
    await page.getByRole('button', { name: 'Create token' }).click();
    await page.waitForURL(`${base}/settings`);
    const token = (await page.getByTestId('new-token').textContent())?.trim();
    expect(token).toMatch(/^svc_owner_[0-9a-f]{48}$/);
    // A Copy button beside it, as for keys and secrets, that copies exactly the token.
    const copy = page.getByRole('button', { name: 'Copy' });
    expect(await copy.isVisible()).toBe(true);
    expect(await copy.getAttribute('data-copy')).toBe(token);
    await page.screenshot({ path: join(SHOTS, 'settings-token-created.png'), fullPage: true });
    // It works against the owner API.
    const me = await fetch(`${base}/api/v1/owner/tokens`, { headers: { authorization: `Bearer ${token}` } });
    expect(me.status).toBe(200);

    // Reload: the token is not shown again and no second one appears.
    await page.reload();
    expect(await page.getByTestId('new-token').count()).toBe(0);
    expect(await page.getByTestId('token-row').count()).toBe(1);
    expect(await page.content()).not.toContain(token!);

    // At phone width the page fits without sideways scrolling.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.reload();
    const { scrollWidth, innerWidth } = await page.evaluate(() => ({
      scrollWidth: document.documentElement.scrollWidth,
      innerWidth: window.innerWidth,
    }));
    expect(scrollWidth).toBeLessThanOrEqual(innerWidth);
    await page.screenshot({ path: join(SHOTS, 'settings-phone.png'), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 800 });

    await page.getByRole('button', { name: 'Revoke' }).click();
    await page.waitForURL(`${base}/settings?notice=revoked`);
    expect(await page.getByTestId('token-row').count()).toBe(0);
    const after = await fetch(`${base}/api/v1/owner/tokens`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(after.status).toBe(401);
  });
  it('a tunnel bot whose client never connected is shown waiting for it, calmly, on the overview and in its delivery log', async () => {
    const base = `http://localhost:${port}`;
    const token = await service.ctx.db.transaction(async (tx) => {
      const owner = await findOrCreateOwner(tx, 'newcomer@example.com', Date.now());
      return createOwnerToken(tx, owner.id, Date.now());
    });
    const registered = await fetch(`${base}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ bot_name: 'tunnelled', owner_email: 'newcomer@example.com' }),
    });
    expect(registered.status).toBe(201);
    const bot = (await registered.json()) as { bot_id: string; claim_token: string };
    const claimed = await fetch(`${base}/api/v1/owner/claims`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ claim_token: bot.claim_token }),
    });
    expect(claimed.status).toBe(200);
    // The claim's events are tried once: nothing is connected, so they wait.
    const worker = new DeliveryWorker(service.ctx);
    expect(await worker.runOnce()).toBeGreaterThan(0);
    await worker.stop();

    await page.goto(`${base}/`);
    const waiting = page.getByTestId('webhook-waiting').first();
    expect(await waiting.textContent()).toContain(
      "waiting for the bot's tunnel client — run the command it was given",
    );
    expect(await page.content()).not.toMatch(/unreachable|failed\)|DNS/);
    await page.goto(`${base}/bots/${bot.bot_id}/webhooks`);
    expect(await page.getByTestId('delivery-waiting').count()).toBeGreaterThan(0);
    expect(await page.getByTestId('delivery-error').count()).toBe(0);
    expect(await page.getByTestId('delivery').first().textContent()).toContain('when the tunnel connects');
    await page.screenshot({ path: join(SHOTS, 'webhooks-waiting-for-tunnel.png'), fullPage: true });
  });
});
