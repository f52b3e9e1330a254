import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveChromium, launchChromium, requireChromiumInCi } from '../support/browser.ts';
import { magicLinkIn } from '../dashboard/browserless.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { ask } from '../topups/helpers.ts';
import { freePort } from '../support/process.ts';

// Top-up requests in the approvals inbox in a real browser (Debian chromium): the section renders
// under the page's Content-Security-Policy, fits a phone, and its Decline (with a note) and Approve
// forms work. Mail is captured (the SMTP side is tested in test/topups/mail.test.ts).

const SHOTS = join(process.cwd(), 'test-artifacts', 'screenshots');

requireChromiumInCi('top-up requests in a browser');

describe.skipIf(!haveChromium)('top-up requests in a browser', () => {
  let svc: TestService;
  let base: string;
  let browser: Browser;
  let page: Page;
  const cspViolations: string[] = [];

  beforeAll(async () => {
    await mkdir(SHOTS, { recursive: true });
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    svc = await createTestService({ env: { BASE_URL: base, LOG_LEVEL: 'warn' } });
    await svc.app.listen({ port, host: '127.0.0.1' });
    browser = await launchChromium();
    page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    page.on('console', (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
  });
  afterAll(async () => {
    await browser?.close();
    await svc?.close();
  });

  it('shows the requests, declines one with a note and approves another', async () => {
    const owner = await createOwner(svc, 'topup.browser@example.com');
    const bot = await activeBot(svc, owner, { body: { bot_name: 'Research Bot' } });
    const declineMe = (await ask(svc, bot, { amount_cents: 1250, reason: 'Conference ticket' })).json();
    const approveMe = (
      await ask(svc, bot, { amount_cents: 3000, reason: 'GPU hours for the weekly report' })
    ).json();

    const sent = svc.mailer.sent.length;
    await page.goto(`${base}/signin`);
    await page.fill('input[name=email]', owner.email);
    await page.click('button[type=submit]');
    await page.waitForURL(/signin/);
    const mail = svc.mailer.sent.slice(sent).find((m) => m.to === owner.email)!;
    await page.goto(magicLinkIn(mail.text).replace('http://localhost:8080', base));
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((url) => !url.pathname.startsWith('/signin'));

    await page.goto(`${base}/approvals`);
    const cards = page.getByTestId('topup');
    expect(await cards.count()).toBe(2);
    const section = (await page.textContent('#topups-h + ul')) ?? '';
    expect(section).toContain('“Conference ticket”');
    expect(section).toContain('Research Bot');
    await page.screenshot({ path: join(SHOTS, 'topups-inbox-desktop.png'), fullPage: true });
    // Nothing sticks out sideways on a phone.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: join(SHOTS, 'topups-inbox-phone.png'), fullPage: true });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(1);
    await page.setViewportSize({ width: 1280, height: 900 });

    const declineCard = page.locator(`[data-topup="${declineMe.topup_id}"]`);
    await declineCard.getByLabel('Note for the bot').fill('Ask again in March');
    await declineCard.getByRole('button', { name: 'Decline' }).click();
    await page.waitForURL(/notice=topup_declined/);
    expect(await page.getByTestId('topup').count()).toBe(1);

    await page
      .locator(`[data-topup="${approveMe.topup_id}"]`)
      .getByRole('button', { name: /Approve and add \$30\.00/ })
      .click();
    await page.waitForURL(/notice=topup_approved/);
    await expect(page.getByText('No bot is asking you for funds.').isVisible()).resolves.toBe(true);

    const rows = await svc.ctx.db.query<{ id: string; status: string; note: string | null }>(
      'SELECT id, status, note FROM topup_requests WHERE bot_id = $1',
      [bot.bot_id],
    );
    expect(rows.find((r) => r.id === declineMe.topup_id)).toMatchObject({
      status: 'declined',
      note: 'Ask again in March',
    });
    expect(rows.find((r) => r.id === approveMe.topup_id)!.status).toBe('approved');
    const wallet = await svc.ctx.db.query<{ n: number }>(
      'SELECT available_micros::bigint AS n FROM wallets WHERE bot_id = $1',
      [bot.bot_id],
    );
    expect(wallet[0]!.n).toBe(3000 * 10_000);
    expect(cspViolations).toEqual([]);
  });
});
