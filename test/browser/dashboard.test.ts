import { DIGITS, realCardNumber } from '../support/cards.ts';
import { mkdir } from 'node:fs/promises';
import { readFile } from 'node:fs/promises';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { haveChromium, launchChromium, requireChromiumInCi } from '../support/browser.ts';
import { startService, type Service } from '../../src/server.ts';
import { webhookDeliveryJob } from '../../src/webhooks/job.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { testConfig } from '../support/service.ts';
import { freePort } from '../support/process.ts';
import { type ReceivedMail, startTestSmtp, type TestSmtp } from '../support/smtp.ts';

// The dashboard in a real browser (Debian chromium driven by playwright-core) against a real
// listening service whose mailer speaks SMTP to a real smtp-server on loopback. Nothing is mocked:
// the magic link is read out of the mail the SMTP server received.

const SHOTS = join(process.cwd(), 'test-artifacts', 'screenshots');

/** Undoes quoted-printable transfer encoding (nodemailer wraps long lines with soft breaks). */
function decodeQuotedPrintable(text: string): string {
  return text
    .replace(/=\r?\n/g, '')
    .replace(/=([0-9A-F]{2})/g, (_m, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
}

requireChromiumInCi('dashboard in a browser');

describe.skipIf(!haveChromium)('dashboard in a browser', () => {
  let smtp: TestSmtp;
  let database: TestDatabase;
  let service: Service;
  let base: string;
  let browser: Browser;
  let page: Page;
  const cspViolations: string[] = [];
  /** Pages that scrolled sideways at phone width (see shoot). */
  const overflows: string[] = [];
  /** Selects too narrow for an option's text (see shoot). */
  const cutSelects: string[] = [];
  /** Table cells with text sticking out or a word broken mid-word (see shoot). */
  const cellSlips: string[] = [];
  let receiver: HttpServer;
  let receiverHealthy = false;
  let receiverHits = 0;

  const nextMail = (to: string, after: number): Promise<ReceivedMail> => smtp.nextMail(to, after);

  /** waitForURL that says what the page shows instead when it times out. */
  async function arrive(url: string | RegExp) {
    try {
      await page.waitForURL(url, { timeout: 10_000 });
    } catch (error) {
      const shown = (await page.textContent('body').catch(() => ''))?.replace(/\s+/g, ' ').slice(0, 400);
      throw new Error(`expected ${url}, the browser is at ${page.url()} showing: ${shown}`, { cause: error });
    }
  }

  /** The card wizard's fields other than the number: expiry 09/2031, holder and address. */
  async function fillCardHolder() {
    await page.getByLabel('Expiry month (MM)').fill('09');
    await page.getByLabel('Expiry year (YYYY)').fill('2031');
    await page.getByLabel('Name on the card').fill('Ada Lovelace');
    await page.getByLabel('Billing address', { exact: true }).fill('12 St James Square');
    await page.getByLabel('City').fill('London');
    await page.getByLabel('Postal code').fill('SW1Y 4JH');
    await page.getByLabel('Country (2 letters)').fill('GB');
  }

  async function shoot(name: string) {
    for (const [width, height, suffix] of [
      [1280, 900, 'desktop'],
      [390, 844, 'phone'],
    ] as const) {
      await page.setViewportSize({ width, height });
      await page.screenshot({ path: join(SHOTS, `${name}-${suffix}.png`), fullPage: true });
      // Every select is wide enough for its longest option (nothing cut off).
      const cut = await page.evaluate(() => {
        const probe = document.createElement('span');
        probe.style.position = 'absolute';
        probe.style.visibility = 'hidden';
        probe.style.whiteSpace = 'nowrap';
        document.body.append(probe);
        const out: string[] = [];
        for (const el of Array.from(document.querySelectorAll<HTMLSelectElement>('select'))) {
          if (el.offsetParent === null) continue; // not shown
          probe.style.font = getComputedStyle(el).font;
          for (const option of Array.from(el.options)) {
            probe.textContent = option.text;
            // Text plus the select's padding and its arrow (about 36px).
            if (probe.getBoundingClientRect().width + 36 > el.clientWidth)
              out.push(`${el.id}: ${option.text}`);
          }
        }
        probe.remove();
        return out;
      });
      for (const c of cut) cutSelects.push(`${name}-${suffix}: ${c}`);
      // Table cells at both widths: nothing sticks out of its cell (a clipped "Retry now"), and no
      // word of ordinary text is broken across lines ("accou/nt"). Identifiers and addresses in
      // <code> may break anywhere: they have no word to keep.
      const slips = await page.evaluate(() => {
        const out: string[] = [];
        // A table wider than its card scrolls inside it, with what is on the right cut off.
        for (const wrap of Array.from(document.querySelectorAll<HTMLElement>('.table-wrap'))) {
          if (wrap.offsetParent !== null && wrap.scrollWidth > wrap.clientWidth + 1) {
            const cells = Array.from(
              wrap.querySelectorAll<HTMLElement>('tr:first-child > td, tr:first-child > th'),
            )
              .map(
                (c) =>
                  `${Math.round(c.getBoundingClientRect().width)}:${(c.textContent ?? '').trim().slice(0, 25)}`,
              )
              .join(' | ');
            out.push(`table wider than its card by ${wrap.scrollWidth - wrap.clientWidth}px (${cells})`);
          }
        }
        for (const cell of Array.from(document.querySelectorAll<HTMLElement>('td, th'))) {
          if (cell.offsetParent === null) continue;
          const box = cell.getBoundingClientRect();
          for (const el of Array.from(cell.querySelectorAll<HTMLElement>('*'))) {
            if (el.offsetParent === null || el.closest('details:not([open])') !== null) continue;
            const r = el.getBoundingClientRect();
            if (r.width > 0 && (r.right > box.right + 1 || r.left < box.left - 1))
              out.push(
                `sticks out of its cell: ${el.tagName.toLowerCase()} "${(el.textContent ?? '').trim().slice(0, 40)}"`,
              );
          }
          const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
          for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            const parent = node.parentElement;
            if (!parent || parent.closest('code, pre, details:not([open])') || parent.offsetParent === null)
              continue;
            const text = node.textContent ?? '';
            for (const m of text.matchAll(/\S+/g)) {
              const word = m[0];
              if (word.length < 3 || word.length > 24) continue;
              const range = document.createRange();
              range.setStart(node, m.index ?? 0);
              range.setEnd(node, (m.index ?? 0) + word.length);
              const tops = new Set(Array.from(range.getClientRects()).map((r) => Math.round(r.top)));
              if (tops.size > 1) out.push(`word broken across lines: "${word}"`);
            }
          }
        }
        return [...new Set(out)];
      });
      for (const slip of slips) cellSlips.push(`${name}-${suffix}: ${slip}`);
      if (suffix === 'phone') {
        // Responsive: nothing may stick out sideways on a phone (no horizontal scroll). Collected
        // and asserted at the end of each test, so one run names every page that overflows.
        const sideways = await page.evaluate(() => ({
          scrollWidth: document.documentElement.scrollWidth,
          innerWidth: window.innerWidth,
        }));
        if (sideways.scrollWidth > sideways.innerWidth)
          overflows.push(`${name}: scrollWidth ${sideways.scrollWidth} > innerWidth ${sideways.innerWidth}`);
      }
    }
    await page.setViewportSize({ width: 1280, height: 900 });
  }

  beforeAll(async () => {
    await mkdir(SHOTS, { recursive: true });
    smtp = await startTestSmtp();

    database = await createTestDatabase();
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    const config = testConfig({
      BASE_URL: base,
      PORT: String(port),
      HOST: '127.0.0.1',
      SMTP_URL: smtp.url,
      MAIL_FROM: 'Bot Payment Service <no-reply@botpay.test>',
      LOG_LEVEL: 'warn',
      // The partner wallet can be turned on; nothing here reads the chain.
      X402_NETWORK: 'eip155:31337',
      X402_RPC_URL: 'http://127.0.0.1:9',
      X402_USDC_ADDRESS: '0x5FbDB2315678afecb367f032d93F642f64180aa3',
    });
    // The real webhook worker runs (the delivery log and its retry are tested below).
    service = await startService(config, { db: database.db, jobs: [webhookDeliveryJob] });
    // A real webhook receiver on loopback: answers 503 until `receiverHealthy`, then 200.
    receiver = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        receiverHits++;
        res.writeHead(receiverHealthy ? 200 : 503, { 'content-type': 'text/plain' });
        res.end(receiverHealthy ? 'ok' : 'receiver is down for maintenance');
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));

    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
    // The pages must work under their own Content-Security-Policy (no inline styles or scripts).
    page.on('console', (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
  });

  afterAll(async () => {
    await browser?.close();
    await service?.close();
    await new Promise<void>((resolve) => (receiver ? receiver.close(() => resolve()) : resolve()));
    await database?.drop();
    await smtp?.close();
  });

  it('signs in by e-mail, claims a bot, pairs, funds, freezes, unfreezes and rotates a key', async () => {
    const ownerEmail = 'owner.browser@example.com';
    const mailsAtStart = smtp.inbox.length;
    const registered = await fetch(`${base}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        bot_name: 'Pantry Bot',
        owner_email: ownerEmail,
        description: 'Keeps the pantry stocked',
        callback_url: 'http://127.0.0.1:9/hook',
      }),
    });
    expect(registered.status).toBe(201);
    const bot = (await registered.json()) as {
      bot_id: string;
      api_key: string;
      owner_verification_url: string;
    };
    expect(bot.owner_verification_url).toBe(
      `${base}/claim?token=${new URL(bot.owner_verification_url).searchParams.get('token')}`,
    );

    // The claim link first leads to sign-in.
    // The owner follows the claim link from the registration mail the SMTP server received.
    const claimMail = decodeQuotedPrintable((await nextMail(ownerEmail, mailsAtStart)).raw);
    expect(claimMail).toContain('A bot named "Pantry Bot" registered');
    expect(claimMail).toContain(bot.owner_verification_url);
    await page.goto(bot.owner_verification_url);
    expect(new URL(page.url()).pathname).toBe('/signin');
    await expect(page.getByText('come straight back to claim').isVisible()).resolves.toBe(true);
    await shoot('01-sign-in');

    const mailsBefore = smtp.inbox.length;
    await page.getByLabel('E-mail address').fill(ownerEmail);
    await page.getByRole('button', { name: 'Send me a sign-in link' }).click();
    await arrive(/\/signin\/check-email/);
    expect(await page.getByTestId('sent-to').textContent()).toBe(ownerEmail);
    await shoot('02-check-email');

    const mail = await nextMail(ownerEmail, mailsBefore);
    const text = decodeQuotedPrintable(mail.raw);
    expect(text).toContain('Subject: Your sign-in link');
    const link = /(http:\/\/127\.0\.0\.1:\d+\/signin\/verify\?token=[0-9a-f]{64})/.exec(text)?.[1];
    expect(link, 'sign-in link in the received mail').toBeDefined();

    await page.goto(link!);
    await shoot('03-confirm-sign-in');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await arrive(/\/claim\?token=/);
    await expect(page.getByRole('heading', { name: 'Claim “Pantry Bot”?' }).isVisible()).resolves.toBe(true);
    await shoot('04-claim');
    const claimUrl = page.url();
    await page.goto(`${base}/`);
    await expect(page.getByRole('heading', { name: 'No bots yet' }).isVisible()).resolves.toBe(true);
    await shoot('04b-overview-empty');
    await page.goto(claimUrl);

    await page.getByRole('button', { name: 'Claim this bot' }).click();
    await arrive(`${base}/bots/${bot.bot_id}?notice=claimed`);
    await expect(page.getByText('The bot is yours now').isVisible()).resolves.toBe(true);
    await shoot('05-bot-claimed');
    const claimedNotice = decodeQuotedPrintable((await nextMail(ownerEmail, mailsBefore + 1)).raw);
    expect(claimedNotice).toContain(`The bot "Pantry Bot" (${bot.bot_id}) was claimed`);

    // Fund the wallet.
    await page.getByLabel('Amount, $').fill('25');
    await page.getByRole('button', { name: 'Add funds' }).click();
    await arrive(/notice=funded/);
    expect(await page.getByTestId('balance').textContent()).toBe('$25.00');
    const status = await fetch(`${base}/api/v1/bot/status`, {
      headers: { authorization: `Bearer ${bot.api_key}` },
    });
    expect(
      ((await status.json()) as { rails: { card_wallet: { balance_usd: number } } }).rails.card_wallet
        .balance_usd,
    ).toBe(25);
    await shoot('06-bot-funded');

    // Freeze and unfreeze.
    await page.getByRole('button', { name: 'Freeze wallet' }).click();
    await arrive(/notice=frozen/);
    expect(await page.getByTestId('wallet-status').textContent()).toBe('frozen');
    await shoot('07-bot-frozen');
    await page.getByRole('button', { name: 'Unfreeze wallet' }).click();
    await arrive(/notice=unfrozen/);
    expect(await page.getByTestId('wallet-status').textContent()).toBe('active');

    // The partner wallet: turned on, its address shown with a QR code to fund it.
    await page.getByRole('button', { name: 'Turn on (creates a wallet)' }).click();
    await arrive(/notice=x402_on/);
    const address = (await page.getByTestId('partner-address').textContent())!.trim();
    expect(address).toMatch(/^0x[0-9a-fA-F]{40}$/);
    expect(await page.locator('[data-testid=partner-qr] svg').isVisible()).toBe(true);
    await shoot('07b-partner-wallet');

    // Rotate the API key: shown once, the old one stops working.
    await page.getByText('Rotate the API key…').click();
    await page.getByRole('button', { name: 'Rotate API key now' }).click();
    await page.waitForSelector('[data-testid=secret-value]');
    const newKey = (await page.getByTestId('secret-value').textContent())!.trim();
    expect(newKey).toMatch(/^svc_live_[0-9a-f]{48}$/);
    // The script reveals a Copy button beside the key.
    await expect(page.getByRole('button', { name: 'Copy' }).first().isVisible()).resolves.toBe(true);
    await shoot('08-key-rotated');
    const oldKey = await fetch(`${base}/api/v1/bot/status`, {
      headers: { authorization: `Bearer ${bot.api_key}` },
    });
    expect(oldKey.status).toBe(401);
    // Post/redirect/get: reloading the page that showed the key rotates nothing and shows it no more.
    expect(new URL(page.url()).searchParams.get('flash')).toMatch(/^[0-9a-f]{32}$/);
    await page.reload();
    expect(await page.content()).not.toContain(newKey);
    await expect(page.getByText('shown once and cannot be shown again').isVisible()).resolves.toBe(true);
    const freshKey = await fetch(`${base}/api/v1/bot/status`, {
      headers: { authorization: `Bearer ${newKey}` },
    });
    expect(freshKey.status).toBe(200);
    await page.goto(`${base}/bots/${bot.bot_id}`);
    expect(await page.content()).not.toContain(newKey);
    await expect(page.getByText('Rotated the API key').first().isVisible()).resolves.toBe(true);
    await shoot('09-bot-page');

    // A pairing code links a second bot straight away.
    await page.getByRole('link', { name: 'Pairing codes' }).click();
    await page.getByRole('button', { name: 'Create a pairing code' }).click();
    const code = (await page.getByTestId('pairing-code').textContent())!.trim();
    expect(code).toMatch(/^\d{6}$/);
    await shoot('10-pairing-code');
    await page.reload();
    expect(await page.getByTestId('pairing-code').count()).toBe(0);
    const paired = await fetch(`${base}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ bot_name: 'Paired Bot', owner_email: ownerEmail, pairing_code: code }),
    });
    expect(paired.status).toBe(201);

    await page.getByRole('link', { name: 'Bots', exact: true }).click();
    await expect(page.getByRole('link', { name: 'Paired Bot' }).isVisible()).resolves.toBe(true);
    await expect(page.getByRole('link', { name: 'Pantry Bot' }).isVisible()).resolves.toBe(true);
    await shoot('11-overview');

    await page.getByRole('link', { name: 'Guardrails' }).click();
    await page.getByLabel('Per purchase, $').fill('7.50');
    await page.getByRole('button', { name: 'Save guardrails' }).click();
    await arrive(/notice=guardrails/);
    expect(await page.getByTestId('per-transaction').textContent()).toBe('$7.50');
    await shoot('12-guardrails');
    // A per-purchase limit above the per-day one: warned while typing and after saving.
    const perDay = await page.locator('#daily_budget_usd').getAttribute('data-current');
    await page.getByLabel('Per purchase, $').fill(String(Number(perDay) + 1));
    await expect(page.locator('.limit-warning').isVisible()).resolves.toBe(true);
    await shoot('12b-guardrails-warning');
    await page.getByRole('button', { name: 'Save guardrails' }).click();
    await arrive(/flash=/);
    expect(await page.locator('.flash.warn').textContent()).toContain('is above per day');
    await page.getByLabel('Per purchase, $').fill('7.50');
    await page.getByRole('button', { name: 'Save guardrails' }).click();
    await arrive(/notice=guardrails/);

    await page.getByRole('link', { name: 'Activity' }).click();
    await expect(page.getByText('Signed in').first().isVisible()).resolves.toBe(true);
    await shoot('13-activity');

    // Beside each UTC time the script adds the relative time (and the local one outside UTC).
    expect(await page.locator('.when .rel').first().textContent()).toMatch(/just now|ago/);

    await page.goto(`${base}/bots/bot_aaaaaaaaaaaaaaaa`);
    await expect(page.getByRole('heading', { name: 'Not found' }).isVisible()).resolves.toBe(true);
    await shoot('14-not-found');
    // A path no route has: the signed-in header stays (navigation and sign-out).
    await page.goto(`${base}/no/such/page`);
    await expect(page.getByRole('heading', { name: 'Not found' }).isVisible()).resolves.toBe(true);
    await expect(page.getByRole('button', { name: 'Sign out' }).isVisible()).resolves.toBe(true);
    await expect(page.getByRole('link', { name: 'Guardrails' }).isVisible()).resolves.toBe(true);
    await shoot('14b-unknown-path');
    const icon = await page.request.get(`${base}/favicon.svg`);
    expect(icon.status()).toBe(200);
    expect(icon.headers()['content-type']).toContain('image/svg+xml');
    expect(await page.locator('link[rel=icon]').getAttribute('href')).toBe('/favicon.svg');

    // The used link now explains itself.
    await page.goto(link!);
    await expect(page.getByRole('heading', { name: 'This link was already used' }).isVisible()).resolves.toBe(
      true,
    );
    await shoot('15-link-used');

    await page.goto(`${base}/`);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await arrive(`${base}/signin?signed_out=1`);
    await shoot('16-signed-out');
    await page.goto(`${base}/bots/${bot.bot_id}`);
    expect(new URL(page.url()).pathname).toBe('/signin');
    expect(cspViolations).toEqual([]);
    expect(overflows).toEqual([]);
    expect(cutSelects).toEqual([]);
    expect(cellSlips).toEqual([]);
  });
  it('adds and activates a card, downloads the profiles file, approves from the inbox and the e-mail, denies, retries a webhook', async () => {
    const ownerEmail = 'cards.browser@example.com';
    const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const mailsAtStart = smtp.inbox.length;
    const registered = await fetch(`${base}/api/v1/bots/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ bot_name: 'Card Bot', owner_email: ownerEmail, callback_url: receiverUrl }),
    });
    expect(registered.status).toBe(201);
    const bot = (await registered.json()) as {
      bot_id: string;
      api_key: string;
      owner_verification_url: string;
    };
    await nextMail(ownerEmail, mailsAtStart); // the claim mail

    // Sign in through the claim link and claim the bot.
    await page.goto(bot.owner_verification_url);
    const beforeSignIn = smtp.inbox.length;
    await page.getByLabel('E-mail address').fill(ownerEmail);
    await page.getByRole('button', { name: 'Send me a sign-in link' }).click();
    await arrive(/\/signin\/check-email/);
    const signInMail = decodeQuotedPrintable((await nextMail(ownerEmail, beforeSignIn)).raw);
    const signInLink = /(http:\/\/127\.0\.0\.1:\d+\/signin\/verify\?token=[0-9a-f]{64})/.exec(
      signInMail,
    )![1]!;
    await page.goto(signInLink);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await arrive(/\/claim\?token=/);
    await page.getByRole('button', { name: 'Claim this bot' }).click();
    await arrive(`${base}/bots/${bot.bot_id}?notice=claimed`);
    await page.getByLabel('Amount, $').fill('40');
    await page.getByRole('button', { name: 'Add funds' }).click();
    await arrive(/notice=funded/);

    // Card wizard: start, type the card in the browser, which splits it and sends only digits.
    await page.getByRole('link', { name: 'Add a card →' }).click();
    await arrive(`${base}/bots/${bot.bot_id}/cards`);
    await shoot('20-cards-empty');
    await page.getByLabel('Name for this card').fill('Visa ending 42');
    await page.getByRole('button', { name: 'Start a card' }).click();
    await arrive(/\/cards\/card_[a-z2-7]+\?notice=started/);
    const cardId = /\/cards\/(card_[a-z2-7]+)/.exec(page.url())![1]!;
    const positions = (await page.locator('#card-wizard').getAttribute('data-positions'))!
      .split(',')
      .map(Number);
    const number = realCardNumber(positions[0]!);
    // One step at a time: while the card is not active, no limits or profiles; the steps are labelled.
    expect(await page.locator('#settings-h').count()).toBe(0);
    expect(await page.locator('#profiles-h').count()).toBe(0);
    expect(await page.locator('.steps li[aria-current=step]').first().textContent()).toBe('Type the card');
    // The page counts digits from 1: positions [8, 9, 10] are "digits 9, 10 and 11".
    expect(await page.getByTestId('digit-positions').textContent()).toContain(
      `digits ${positions[0]! + 1}, ${positions[1]! + 1} and ${positions[2]! + 1}`,
    );
    const sent: string[] = [];
    page.on('request', (r) => sent.push(`${r.url()} ${r.postData() ?? ''}`));
    await shoot('21-card-form');
    // A mistyped number: the page says so and sends nothing.
    await page.getByLabel('Card number').fill(`${number.slice(0, -1)}${(Number(number.slice(-1)) + 1) % 10}`);
    await fillCardHolder();
    await page.getByRole('button', { name: 'Split and activate' }).click();
    await page.locator('#wizard-message').waitFor({ state: 'visible' });
    expect(await page.locator('#wizard-message').textContent()).toContain('mistyped');
    expect(sent.filter((x) => x.includes('/activate'))).toEqual([]);
    await page.getByLabel('Card number').fill(number.replace(/(\d{4})(?=\d)/g, '$1 '));
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('button', { name: 'Split and activate' }).click(),
    ]);
    await page.locator('#wizard-done').waitFor({ state: 'visible' });
    // "Card activated" beside a badge that still said "pending activation": the badge follows.
    expect((await page.getByTestId('card-status').textContent())?.trim()).toBe('active');
    await shoot('22-card-activated');
    // The number never left the browser: no request carried it (nor its middle digits).
    expect(sent.some((x) => x.includes('/activate'))).toBe(true);
    for (const x of sent) {
      expect(x).not.toContain(number);
      expect(x).not.toContain(number.slice(8, 14));
      expect(x).not.toContain('Ada Lovelace');
    }
    // The saved file: six profiles sharing prefix, length, holder and address; the real one is the card.
    expect(download.suggestedFilename()).toBe(`payment-profiles-${cardId}.json`);
    const file = JSON.parse(await readFile((await download.path())!, 'utf8')) as {
      missing_digit_positions: number[];
      missing_digits_are: string;
      profiles: Array<{
        profile_index: number;
        card_number: string;
        cardholder_name: string;
        billing_address: unknown;
      }>;
    };
    expect(file.profiles).toHaveLength(6);
    // The file says which digits are missing the way the page does, and names its 0-based field.
    expect(file.missing_digit_positions).toEqual(positions);
    expect(file.missing_digits_are).toContain(
      `Digits ${positions[0]! + 1}, ${positions[1]! + 1} and ${positions[2]! + 1} of the card number, counting the first digit as 1`,
    );
    expect(await page.locator('#wizard-step2').isHidden()).toBe(true);
    for (const p of file.profiles) {
      expect(p.card_number.slice(0, 8)).toBe(number.slice(0, 8));
      expect(p.card_number).toHaveLength(16);
      expect(p.cardholder_name).toBe('Ada Lovelace');
      expect(p.billing_address).toEqual(file.profiles[0]!.billing_address);
    }
    const realIndex = Number(await page.locator('#card-wizard').getAttribute('data-real-index'));
    expect(file.profiles[realIndex - 1]!.card_number.replace('***', DIGITS)).toBe(number);
    await page.getByRole('link', { name: 'Continue' }).click();
    await arrive(/notice=activated/);
    const api = await page.request.get(
      `${base}/api/v1/owner/bots/${bot.bot_id}/cards/${cardId}/profiles-file`,
    );
    expect(api.status()).toBe(409);
    const card = (await (
      await page.request.get(`${base}/api/v1/owner/bots/${bot.bot_id}/cards/${cardId}`)
    ).json()) as { real_profile_index: number; approval_mode: string };
    expect(card.approval_mode).toBe('ask_for_everything');

    await shoot('22b-card-settings');
    // Card limits: a daily budget of $30.
    await page.getByLabel('Per day, $').fill('30');
    await page.getByRole('button', { name: 'Save limits and approval' }).click();
    await arrive(/notice=settings/);
    expect(await page.getByLabel('Per day, $').inputValue()).toBe('30.00');
    // Amount inputs carry min and step; a per-purchase limit above the daily one is warned about.
    expect(await page.getByLabel('Per purchase, $').getAttribute('min')).toBe('0');
    expect(await page.getByLabel('Per purchase, $').getAttribute('step')).toBe('0.01');
    await page.getByLabel('Per purchase, $').fill('45');
    await expect(page.locator('.limit-warning').isVisible()).resolves.toBe(true);
    await page.getByLabel('Per purchase, $').fill('20');
    await expect(page.locator('.limit-warning').isHidden()).resolves.toBe(true);
    await shoot('22d-card-limits');

    // The bot buys three things over HTTP on its real profile: each is held for the owner.
    const buy = async (item: string, cents: number) => {
      const res = await fetch(`${base}/api/v1/bot/merchant/checkout`, {
        method: 'POST',
        headers: { authorization: `Bearer ${bot.api_key}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          profile_index: card.real_profile_index,
          merchant_name: 'Corner Shop',
          merchant_url: 'https://shop.example/item',
          item_name: item,
          amount_cents: cents,
          category: 'groceries',
        }),
      });
      expect(res.status).toBe(202);
      return ((await res.json()) as { confirmation_id: string }).confirmation_id;
    };
    const mailsBeforeBuys = smtp.inbox.length;
    const first = await buy('Coffee beans', 350);
    const second = await buy('Olive oil', 420);
    const third = await buy('Gold watch', 499);

    // The overview's "3 purchases waiting" links to the inbox; the menu entry shows the count.
    await page.goto(`${base}/`);
    expect(await page.getByTestId('nav-count').textContent()).toBe('3');
    await shoot('22c-overview-waiting');
    await page.getByTestId('waiting-link').click();
    await arrive(`${base}/approvals`);
    const firstCard = page.locator(`[data-confirmation="${first}"]`);
    // The countdown script ticks (without JavaScript the absolute expiry time is shown).
    await page.waitForFunction(
      (id) =>
        /\d+:\d\d left/.test(
          document.querySelector(`[data-confirmation="${id}"] .countdown`)?.textContent ?? '',
        ),
      first,
    );
    expect(await page.getByTestId('approval').count()).toBe(3);
    await shoot('23-approvals-inbox');
    await firstCard.getByRole('button', { name: 'Approve' }).click();
    await arrive(/notice=approved/);
    await expect(page.getByText('Purchase approved').first().isVisible()).resolves.toBe(true);
    const status = await fetch(`${base}/api/v1/bot/merchant/checkout/status?confirmation_id=${first}`, {
      headers: { authorization: `Bearer ${bot.api_key}` },
    });
    expect((await status.json()) as { status: string; missing_digits: string }).toMatchObject({
      status: 'approved',
      missing_digits: '739',
    });

    // Deny the third one from the inbox.
    await page.locator(`[data-confirmation="${third}"]`).getByRole('button', { name: 'Deny' }).click();
    await arrive(/notice=denied/);
    await expect(
      page.locator(`[data-testid=decided][data-confirmation="${third}"]`).getByText('Denied').isVisible(),
    ).resolves.toBe(true);
    await shoot('24-approvals-decided');
    // On a phone the history shows amount and outcome first, fully inside the screen.
    await page.setViewportSize({ width: 390, height: 844 });
    for (const cell of await page.locator('[data-testid=decided] td.k').all()) {
      const box = (await cell.boundingBox())!;
      expect(box.x).toBeGreaterThanOrEqual(0);
      expect(box.x + box.width).toBeLessThanOrEqual(390);
      expect(await cell.isVisible()).toBe(true);
    }
    await page.setViewportSize({ width: 1280, height: 900 });

    // Approve the second one from the e-mail the SMTP server received.
    const mail = await (async () => {
      const deadline = Date.now() + 15_000;
      for (;;) {
        const found = smtp.inbox
          .slice(mailsBeforeBuys)
          .map((m) => decodeQuotedPrintable(m.raw))
          .find((text) => text.includes('Olive oil'));
        if (found) return found;
        if (Date.now() > deadline) throw new Error('no approval mail for the second purchase');
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    expect(mail).toContain('Subject: Approve $4.20 at Corner Shop for Card Bot?');
    const approveLink = /(http:\/\/127\.0\.0\.1:\d+\/approvals\/one-click\/approve\?\S+)/.exec(mail)![1]!;
    await page.goto(approveLink);
    await expect(page.getByRole('heading', { name: 'Approve this purchase?' }).isVisible()).resolves.toBe(
      true,
    );
    await shoot('25-one-click-confirm');
    await page.getByRole('button', { name: 'Approve purchase' }).click();
    await expect(page.getByRole('heading', { name: 'Purchase approved' }).isVisible()).resolves.toBe(true);
    await shoot('26-one-click-done');
    await page.goto(approveLink);
    await expect(page.getByRole('heading', { name: 'This link was already used' }).isVisible()).resolves.toBe(
      true,
    );
    await shoot('27-one-click-used');
    const second_ = await fetch(`${base}/api/v1/bot/merchant/checkout/status?confirmation_id=${second}`, {
      headers: { authorization: `Bearer ${bot.api_key}` },
    });
    expect(((await second_.json()) as { status: string }).status).toBe('approved');

    // The webhook log: the receiver answered 503 so far; once it is back, "Retry now" delivers.
    await page.goto(`${base}/bots/${bot.bot_id}/webhooks`);
    const deadline = Date.now() + 15_000;
    while (receiverHits === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(receiverHits).toBeGreaterThan(0);
    await page.reload();
    const attempted = page.locator('[data-testid=delivery]', { hasText: '503' }).first();
    await expect(attempted.isVisible()).resolves.toBe(true);
    await expect(
      attempted.getByText('receiver is down for maintenance', { exact: false }).count(),
    ).resolves.toBe(1);
    await shoot('28-webhook-log');
    // The payload that was sent and the response excerpt are one click away.
    await attempted.getByText('Payload sent').click();
    expect(await attempted.getByTestId('payload').textContent()).toContain('"event"');
    await attempted.getByText('Response excerpt').click();
    expect(await attempted.getByTestId('response-excerpt').textContent()).toContain('maintenance');
    await shoot('28b-webhook-payload');
    await page.getByRole('link', { name: 'retrying', exact: true }).click();
    await arrive(/status=retrying/);
    expect(await page.getByTestId('delivery').count()).toBeGreaterThan(0);
    for (const status of await page
      .getByTestId('delivery')
      .evaluateAll((els) => els.map((el) => el.getAttribute('data-status'))))
      expect(status).toBe('pending');
    await page.goto(`${base}/bots/${bot.bot_id}/webhooks`);
    const deliveryId = (await attempted.getAttribute('data-delivery'))!;
    receiverHealthy = true;
    await attempted.getByRole('button', { name: 'Retry now' }).click();
    await arrive(/notice=retried/);
    for (;;) {
      const delivered = await page
        .locator(`[data-delivery="${deliveryId}"]`)
        .getByText('delivered', { exact: true })
        .count();
      if (delivered > 0) break;
      if (Date.now() > deadline + 15_000) throw new Error('the retried delivery was not delivered');
      await new Promise((r) => setTimeout(r, 200));
      await page.goto(`${base}/bots/${bot.bot_id}/webhooks`);
    }
    await shoot('29-webhook-delivered');

    // A weekly schedule for the real profile, then paused.
    await page.getByRole('link', { name: 'Schedules' }).click();
    await arrive(`${base}/bots/${bot.bot_id}/schedules`);
    await page.getByLabel('Item').fill('Coffee beans');
    await page.getByLabel('Amount, $').fill('3.50');
    await page.getByLabel('Merchant', { exact: true }).fill('Corner Shop');
    await page.getByLabel('Merchant web address').fill('https://shop.example/coffee');
    await page.getByLabel('When (cron)').fill('0 9 * * 1');
    await page.getByLabel('Time zone').fill('Europe/Berlin');
    await page.getByRole('button', { name: 'Create schedule' }).click();
    await arrive(/notice=created/);
    const schedule = page.getByTestId('schedule').first();
    await expect(schedule.getByText('0 9 * * 1').isVisible()).resolves.toBe(true);
    await schedule.getByRole('button', { name: 'Pause' }).click();
    await arrive(/notice=pause/);
    await expect(
      page.getByTestId('schedule').first().getByRole('button', { name: 'Resume' }).isVisible(),
    ).resolves.toBe(true);
    await shoot('30-schedules');

    await page.goto(`${base}/bots/${bot.bot_id}`);
    // Transactions say what was bought, with the balance after each.
    const coffee = page.getByTestId('transaction').filter({ hasText: 'Coffee beans' }).first();
    await expect(coffee.getByText('at Corner Shop').isVisible()).resolves.toBe(true);
    expect(await page.getByTestId('balance-after').first().textContent()).toBe(
      await page.getByTestId('balance').textContent(),
    );
    await shoot('31-bot-with-purchases');
    await page.goto(`${base}/activity`);
    // Names, not ids: the activity says which card and which purchase.
    await expect(page.getByText('Visa ending 42').first().isVisible()).resolves.toBe(true);
    await expect(page.getByText('Coffee beans at Corner Shop').first().isVisible()).resolves.toBe(true);
    expect(await page.content()).not.toContain(`>${cardId}<`);
    await shoot('32-activity');
    await page.goto(`${base}/bots/${bot.bot_id}`);
    for (const words of [
      'Created a schedule',
      'Activated a card',
      'Approved a purchase',
      'Denied a purchase',
      'Retried a webhook delivery',
    ]) {
      await expect(page.getByText(words).first().isVisible(), words).resolves.toBe(true);
    }

    // The same card again (here on the same bot): the wizard notices the card (same length and
    // expiry), asks, and on "the same card" the new card takes the first one's profiles instead of
    // building a second, different file. Its page then writes this card's copy of the first file.
    await page.goto(`${base}/bots/${bot.bot_id}/cards`);
    await page.getByLabel('Name for this card').fill('Visa 42 again');
    await page.getByRole('button', { name: 'Start a card' }).click();
    await arrive(/\/cards\/card_[a-z2-7]+\?notice=started/);
    const againId = /\/cards\/(card_[a-z2-7]+)/.exec(page.url())![1]!;
    const againPositions = (await page.locator('#card-wizard').getAttribute('data-positions'))!
      .split(',')
      .map(Number);
    await page.getByLabel('Card number').fill(realCardNumber(againPositions[0]!));
    await fillCardHolder();
    await page.getByRole('button', { name: 'Split and activate' }).click();
    await page.getByTestId('same-card-question').waitFor({ state: 'visible' });
    expect(await page.getByTestId('same-card-question').textContent()).toContain(cardId);
    await shoot('33-same-card-question');
    await page.getByRole('button', { name: 'It is the same card: use its profiles' }).click();
    await arrive(`${base}/bots/${bot.bot_id}/cards/${againId}?notice=shared`);
    await expect(page.getByTestId('shared-profiles').isVisible()).resolves.toBe(true);
    const again = (await (
      await page.request.get(`${base}/api/v1/owner/bots/${bot.bot_id}/cards/${againId}`)
    ).json()) as { status: string; same_card_as: string; real_profile_index: number };
    expect(again).toMatchObject({ status: 'active', same_card_as: cardId, real_profile_index: realIndex });
    const [copy] = await Promise.all([
      page.waitForEvent('download'),
      page.locator('#relabel-file').setInputFiles((await download.path())!),
    ]);
    expect(copy.suggestedFilename()).toBe(`payment-profiles-${againId}.json`);
    const copied = JSON.parse(await readFile((await copy.path())!, 'utf8')) as typeof file & {
      card_id: string;
      bot_id: string;
    };
    expect(copied.card_id).toBe(againId);
    expect(copied.profiles).toEqual(file.profiles);
    expect(copied.missing_digit_positions).toEqual(file.missing_digit_positions);
    await shoot('34-same-card-shared');
    // The second card is frozen again, so that the bot keeps one active card.
    await page.getByRole('button', { name: 'Freeze card' }).click();
    await arrive(/notice=status/);

    // Every page of the signed-in dashboard once more, at both widths: none scrolls sideways.
    const everyPage: Array<[string, string]> = [
      ['40-overview', '/'],
      ['41-bot', `/bots/${bot.bot_id}`],
      ['42-cards', `/bots/${bot.bot_id}/cards`],
      ['43-card', `/bots/${bot.bot_id}/cards/${cardId}`],
      ['44-webhooks', `/bots/${bot.bot_id}/webhooks`],
      ['45-webhooks-retrying', `/bots/${bot.bot_id}/webhooks?status=retrying`],
      ['46-schedules', `/bots/${bot.bot_id}/schedules`],
      ['47-approvals', '/approvals'],
      ['48-pairing', '/pairing'],
      ['49-guardrails', '/guardrails'],
      ['50-activity', '/activity'],
      ['51-claim-form', '/claim'],
      ['52-settings', '/settings'],
      ['53-not-found', '/nothing-here'],
    ];
    // A receiver that answers with one long unbroken error line must not widen the webhook log.
    await database.db.query(
      `UPDATE webhook_deliveries SET error = $2, response_excerpt = $3
        WHERE id = (SELECT id FROM webhook_deliveries WHERE bot_id = $1 ORDER BY created_at LIMIT 1)`,
      [bot.bot_id, `connect ECONNREFUSED ${'x'.repeat(400)}`, `<html>${'y'.repeat(900)}</html>`],
    );
    for (const [name, path] of everyPage) {
      await page.goto(`${base}${path}`);
      await shoot(name);
    }
    expect(cspViolations).toEqual([]);
    expect(overflows).toEqual([]);
    expect(cutSelects).toEqual([]);
    expect(cellSlips).toEqual([]);
  });
});
