import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import {
  creditDeposit,
  OTHER_PAY_TO,
  payRequest,
  requirement,
  wrongChecksum,
  X402_ENV,
} from '../x402/helpers.ts';
import { type FormClient, signIn } from './browserless.ts';

// The partner wallet on the dashboard's bot page, through its forms: turn on, address with a QR
// code, limits and lists, key import, payments with transaction hashes.

let svc: TestService;
let client: FormClient;
let bot: Awaited<ReturnType<typeof activeBot>>;
let botUrl: string;

beforeAll(async () => {
  svc = await createTestService({ env: X402_ENV });
  const owner = await createOwner(svc, 'pia@example.com');
  bot = await activeBot(svc, owner);
  botUrl = `/bots/${bot.bot_id}`;
  client = await signIn(svc, 'pia@example.com', '10.60.0.1');
});
afterAll(async () => svc?.close());

async function wallet() {
  return (
    await svc.ctx.db.query<{
      address: string;
      daily_cents: string;
      allow_domains: unknown;
      deny_pay_to: unknown;
    }>(
      'SELECT address, (daily_micros / 10000.0)::float8 AS daily_cents, allow_domains, deny_pay_to FROM x402_wallets WHERE bot_id = $1',
      [bot.bot_id],
    )
  )[0];
}

describe('partner wallet on the bot page', () => {
  it('turns on: the page shows the address, a QR code of it, the balance and limits', async () => {
    const before = await client.get(botUrl);
    expect(before.body).toContain('Turn on (creates a wallet)');
    const on = await client.submit(botUrl, `${botUrl}/rails/partner_wallet`, { status: 'active' });
    expect(on.statusCode, on.body).toBe(303);
    expect(on.headers.location).toBe(`${botUrl}?notice=x402_on`);
    const w = await wallet();
    const page = await client.get(on.headers.location as string);
    expect(page.body).toContain('Partner wallet turned on');
    expect(page.body).toContain(`<code data-testid="partner-address">${w!.address}</code>`);
    expect(page.body).toMatch(/<figure class="qr"[^>]*><svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    expect(page.body).toContain('not read yet');
    expect(page.body).toContain('eip155:31337');
    expect(page.body).not.toContain('key_enc');
  });

  it('saves limits and lists; a bad address or amount is refused with a message and changes nothing', async () => {
    const saved = await client.submit(botUrl, `${botUrl}/x402/settings`, {
      per_transaction_usd: '0.50',
      daily_usd: '2',
      monthly_usd: '20',
      approval_threshold_usd: '0.25',
      approval_mode: 'auto_approve_under_threshold',
      allow_domains: 'api.example.com\n*.data.example.org',
      deny_domains: '',
      allow_pay_to: '',
      deny_pay_to: OTHER_PAY_TO,
    });
    expect(saved.statusCode, saved.body).toBe(303);
    const w = await wallet();
    expect(Number(w!.daily_cents)).toBe(200);
    expect(w!.allow_domains).toEqual(['api.example.com', '*.data.example.org']);
    expect(w!.deny_pay_to).toEqual([OTHER_PAY_TO]);
    const badAddress = await client.submit(botUrl, `${botUrl}/x402/settings`, {
      daily_usd: '3',
      deny_pay_to: wrongChecksum(OTHER_PAY_TO),
    });
    expect(badAddress.statusCode).toBe(400);
    expect(badAddress.body).toContain('checksum');
    const badAmount = await client.submit(botUrl, `${botUrl}/x402/settings`, { daily_usd: 'lots' });
    expect(badAmount.statusCode).toBe(400);
    expect(Number((await wallet())!.daily_cents)).toBe(200);
    // Words with spaces are one entry, refused as a host name: never three "domains".
    for (const text of ['not a domain', 'api.example.com\nnot a domain', 'api example.com']) {
      const badDomain = await client.submit(botUrl, `${botUrl}/x402/settings`, { allow_domains: text });
      expect(badDomain.statusCode, text).toBe(400);
      expect(badDomain.body).toContain('is not a host name');
      expect((await wallet())!.allow_domains).toEqual(['api.example.com', '*.data.example.org']);
    }
    // Commas and blank lines still separate.
    const commas = await client.submit(botUrl, `${botUrl}/x402/settings`, {
      allow_domains: 'a.example.com, b.example.com\r\n\r\n*.c.example.com',
    });
    expect(commas.statusCode, commas.body).toBe(303);
    expect((await wallet())!.allow_domains).toEqual(['a.example.com', 'b.example.com', '*.c.example.com']);
  });

  it('lists payments; the import form refuses a bad key without echoing it and takes a good one', async () => {
    // No domain list: in sign mode a domain list makes the service request the named resource.
    await svc.ctx.db.query(`UPDATE x402_wallets SET allow_domains = '[]' WHERE bot_id = $1`, [bot.bot_id]);
    await creditDeposit(svc, bot.bot_id, 100);
    const paid = await payRequest(svc, bot, {
      resource_url: 'https://api.example.com/a',
      payment_requirements: [requirement()],
    });
    expect(paid.statusCode, paid.body).toBe(200);
    await svc.ctx.db.query(`UPDATE x402_payments SET status = 'settled', tx_hash = $2 WHERE id = $1`, [
      paid.json().payment_id,
      `0x${'ab'.repeat(32)}`,
    ]);
    const page = await client.get(botUrl);
    expect(page.body).toContain('https://api.example.com/a');
    expect(page.body).toContain(`0x${'ab'.repeat(32)}`);

    const bad = await client.submit(botUrl, `${botUrl}/x402/import`, { private_key: '0xnotakey123' });
    expect(bad.statusCode).toBe(400);
    expect(bad.body).not.toContain('0xnotakey123');
    // The wallet still has a balance: replacing its key is refused.
    const key = generatePrivateKey();
    const busy = await client.submit(botUrl, `${botUrl}/x402/import`, { private_key: key });
    expect(busy.statusCode).toBe(409);
    expect(busy.body).not.toContain(key.slice(2));

    const other = await activeBot(svc, await createOwner(svc, 'pia@example.com'));
    const otherUrl = `/bots/${other.bot_id}`;
    const ok = await client.submit(otherUrl, `${otherUrl}/x402/import`, { private_key: key });
    expect(ok.statusCode, ok.body).toBe(303);
    const imported = (
      await svc.ctx.db.query<{ address: string; key_source: string }>(
        'SELECT address, key_source FROM x402_wallets WHERE bot_id = $1',
        [other.bot_id],
      )
    )[0]!;
    expect(imported).toEqual({ address: privateKeyToAccount(key).address, key_source: 'imported' });
    expect(svc.logs()).not.toContain(key.slice(2));
  });
});
