import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLuhnValid } from '../../src/cards/split.ts';
import { DIGITS, realCardNumber } from '../support/cards.ts';
import { runCli } from '../support/process.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

// `botpay card split` run as a real process against a real service on loopback. A recording
// proxy in front of the service keeps every request body the service received, so the test can
// check that the card number never reached it.

let svc: TestService;
let proxy: Server;
let proxyUrl: string;
let dir: string;
const received: string[] = [];

beforeAll(async () => {
  svc = await createTestService();
  const target = await svc.app.listen({ port: 0, host: '127.0.0.1' });
  proxy = createServer(async (req: IncomingMessage, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    received.push(`${req.method} ${req.url} ${body}`);
    const upstream = await fetch(`${target}${req.url}`, {
      method: req.method,
      headers: Object.fromEntries(
        Object.entries(req.headers).filter(([k]) => k !== 'host' && k !== 'content-length'),
      ) as Record<string, string>,
      body: body || undefined,
    });
    res.writeHead(upstream.status, {
      'content-type': upstream.headers.get('content-type') ?? 'application/json',
    });
    res.end(await upstream.text());
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  dir = await mkdtemp(join(tmpdir(), 'botpay-split-'));
});

afterAll(async () => {
  await new Promise<void>((r) => proxy.close(() => r()));
  await svc.close();
  await rm(dir, { recursive: true, force: true });
});

const split = (args: string[], stdin: string, token: string) =>
  runCli(['card', 'split', ...args], { BOTPAY_URL: proxyUrl, BOTPAY_OWNER_TOKEN: token }, stdin);

const HOLDER = [
  '--expiry',
  '09/2031',
  '--name',
  'Ada Lovelace',
  '--address-line1',
  '12 St James Square',
  '--city',
  'London',
  '--postal-code',
  'SW1Y 4JH',
  '--country',
  'GB',
];

describe('botpay card split', () => {
  it('starts and activates a card, writes the profiles file (0600), and never sends the number', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    // The number must have DIGITS at the positions the service picks: start the card first.
    const start = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/cards`,
      headers: owner.auth,
      payload: { label: 'cli' },
    });
    const card = start.json();
    const number = realCardNumber(card.missing_digit_positions[0]);
    const out = join(dir, 'profiles.json');
    const run = await split(
      ['--bot', bot.bot_id, '--card', card.card_id, '--out', out, ...HOLDER],
      `${number}\n`,
      owner.token,
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain(`Card ${card.card_id} is active`);
    expect((await stat(out)).mode & 0o777).toBe(0o600);
    const file = JSON.parse(await readFile(out, 'utf8'));
    expect(file.profiles).toHaveLength(6);
    const real = file.profiles.find(
      (p: { profile_index: number }) => p.profile_index === card.real_profile_index,
    );
    expect(real.card_number.replace('***', DIGITS)).toBe(number);
    for (const p of file.profiles) expect(p.cardholder_name).toBe('Ada Lovelace');
    // Nothing the service received, nothing it logged, and nothing the CLI printed holds the number.
    expect(received.some((r) => r.includes('/activate'))).toBe(true);
    for (const r of received) {
      expect(r).not.toContain(number);
      expect(r).not.toContain(number.slice(8, 14));
      expect(r).not.toContain('Ada Lovelace');
    }
    expect(svc.logs()).not.toContain(number);
    expect(run.stdout + run.stderr).not.toContain(number);
    // The bot's checkout on the real profile completes the real number.
    await svc.app.inject({
      method: 'PATCH',
      url: `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}`,
      headers: owner.auth,
      payload: { approval_mode: 'auto_approve_under_threshold', approval_threshold_cents: 10_000 },
    });
    await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 1000 },
    });
    for (const p of file.profiles) {
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/merchant/checkout',
        headers: bot.auth,
        payload: {
          profile_index: p.profile_index,
          merchant_name: 'A',
          merchant_url: 'https://a.example/x',
          item_name: 'x',
          amount_cents: 100,
        },
      });
      expect(res.statusCode).toBe(200);
      expect(isLuhnValid(p.card_number.replace('***', res.json().missing_digits))).toBe(true);
    }
  });

  it('starts the card itself with --label', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const out = join(dir, 'labelled.json');
    // Any valid card: the CLI learns the positions from the service.
    const run = await split(
      ['--bot', bot.bot_id, '--label', 'Visa', '--out', out, ...HOLDER],
      `${realCardNumber(9)}\n`,
      owner.token,
    );
    expect(run.code, run.stderr).toBe(0);
    const cards = await svc.ctx.db.query<{ status: string; label: string }>(
      'SELECT status, label FROM cards WHERE bot_id = $1',
      [bot.bot_id],
    );
    expect(cards).toEqual([{ status: 'active', label: 'Visa' }]);
  });

  it('hostile or mistyped input: a clear message, exit code 1 or 2, nothing activated, no file left', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const good = realCardNumber(9);
    const cases: Array<[string, string[], string, RegExp]> = [
      ['Luhn error', HOLDER, `${good.slice(0, -1)}${(Number(good.slice(-1)) + 1) % 10}\n`, /mistyped/],
      ['letters', HOLDER, '4532 01ab 1234 5678\n', /only digits/],
      ['unknown network', HOLDER, '9999999999999999\n', /known network/],
      ['expired', HOLDER.map((a) => (a === '09/2031' ? '01/2020' : a)), `${good}\n`, /expired/],
      ['bad expiry', HOLDER.map((a) => (a === '09/2031' ? '2031-09' : a)), `${good}\n`, /MM\/YYYY/],
      ['no number', HOLDER, '\n', /digits/],
    ];
    for (const [what, holder, stdin, message] of cases) {
      const out = join(dir, `bad-${what.replace(/\W/g, '')}.json`);
      const run = await split(
        ['--bot', bot.bot_id, '--label', 'x', '--out', out, ...holder],
        stdin,
        owner.token,
      );
      expect(run.code, what).toBeGreaterThan(0);
      expect(run.stderr, what).toMatch(message);
      await expect(stat(out), what).rejects.toThrow();
    }
    const wrongToken = await split(
      ['--bot', bot.bot_id, '--label', 'x', '--out', join(dir, 'tok.json'), ...HOLDER],
      `${good}\n`,
      'bp_owner_wrong',
    );
    expect(wrongToken.code).toBe(1);
    expect(wrongToken.stderr).toContain('401');
    await expect(stat(join(dir, 'tok.json'))).rejects.toThrow();
    const cards = await svc.ctx.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cards WHERE bot_id = $1 AND status = 'active'`,
      [bot.bot_id],
    );
    expect(cards[0]!.n).toBe(0);
    // An existing file is never overwritten.
    const existing = join(dir, 'profiles.json');
    const before = await readFile(existing, 'utf8');
    const again = await split(
      ['--bot', bot.bot_id, '--label', 'x', '--out', existing, ...HOLDER],
      `${good}\n`,
      owner.token,
    );
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('already exists');
    expect(await readFile(existing, 'utf8')).toBe(before);
  });
});
