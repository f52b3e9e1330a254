import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/platform/crypto.ts';
import { createMailer } from '../../src/platform/mailer.ts';
import { createTestService, registerBot, type TestService } from '../support/service.ts';
import { csrfIn, FormClient, magicLinkIn, signIn } from './browserless.ts';

// Magic-link sign-in, sessions and sign-out through the real forms (app.inject, real database).

let svc: TestService;
let n = 0;
const email = () => `signin-${++n}-${Math.random().toString(36).slice(2, 7)}@example.com`;
const ip = () => `10.20.${Math.floor(n / 250)}.${(n % 250) + 1}`;

beforeAll(async () => {
  // Request lines are at debug with a localhost BASE_URL (src/app.ts, requestLogLevel): this file
  // reads them to check that sign-in tokens are redacted.
  svc = await createTestService({ env: { LOG_LEVEL: 'debug' } });
});
afterAll(async () => {
  await svc.close();
});

async function requestLink(client: FormClient, address: string) {
  const before = svc.mailer.sent.length;
  const res = await client.submit('/signin', '/signin', { email: address });
  const mail = svc.mailer.sent.slice(before).find((m) => m.to === address);
  return { res, link: mail ? new URL(magicLinkIn(mail.text)) : undefined };
}

describe('magic link sign-in', () => {
  it('mails a single-use link, stores only its hash, and opens a session with safe cookie flags', async () => {
    const address = email();
    const client = new FormClient(svc, ip());
    const { res, link } = await requestLink(client, address);
    expect(res.statusCode).toBe(303);
    // The check-email page names the address that was typed, once (a flash, not the URL).
    const checkUrl = String(res.headers.location);
    expect(checkUrl).toMatch(/^\/signin\/check-email\?flash=[0-9a-f]{32}$/);
    expect((await client.get(checkUrl)).body).toContain(`<strong data-testid="sent-to">${address}</strong>`);
    expect((await client.get(checkUrl)).body).not.toContain(address);
    // Another browser cannot read it (the flash belongs to this browser's pre-sign-in cookie).
    expect(link).toBeDefined();
    const token = link!.searchParams.get('token')!;
    expect(link!.origin).toBe('http://localhost:8080');

    const stored = await svc.ctx.db.query<{ token_hash: string }>(
      'SELECT token_hash FROM magic_links WHERE email_normalized = $1',
      [address],
    );
    expect(stored.map((r) => r.token_hash)).toEqual([sha256Hex(token)]);
    const dump = JSON.stringify(await svc.ctx.db.query('SELECT * FROM magic_links'));
    expect(dump).not.toContain(token);

    // Opening the link only shows a confirmation: a mail scanner fetching it does not burn it.
    const confirm = await client.get(`${link!.pathname}${link!.search}`);
    expect(confirm.statusCode).toBe(200);
    expect(confirm.body).toContain('Finish signing in');
    expect(confirm.body).not.toContain('Welcome back');
    const again = await client.get(`${link!.pathname}${link!.search}`);
    expect(again.statusCode).toBe(200);

    const verify = await client.post('/signin/verify', {
      token,
      _csrf: csrfIn(confirm.body, '/signin/verify'),
    });
    expect(verify.statusCode).toBe(303);
    expect(verify.headers.location).toBe('/');
    const cookie = verify.cookies.find((c) => c.name === 'botpay_session')!;
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Lax', path: '/', maxAge: 30 * 86400 });
    expect(cookie.secure).toBeFalsy();
    expect(cookie.value).toMatch(/^[0-9a-f]{64}$/);
    const sessions = await svc.ctx.db.query<{ id_hash: string }>('SELECT id_hash FROM owner_sessions');
    expect(sessions.map((s) => s.id_hash)).toContain(sha256Hex(cookie.value));
    expect(JSON.stringify(sessions)).not.toContain(cookie.value);

    const home = await client.get('/');
    expect(home.statusCode).toBe(200);
    expect(home.body).toContain(address);
    expect(home.body).toContain('No bots yet');

    const audit = await svc.ctx.db.query<{ action: string }>(
      `SELECT a.action FROM audit_log a JOIN owners o ON o.id = a.owner_id WHERE o.email_normalized = $1`,
      [address],
    );
    expect(audit.map((a) => a.action)).toEqual(['owner.signed_in']);
    expect(svc.logs()).not.toContain(cookie.value);
    // The link was fetched (GET) twice: request logs carry it redacted.
    expect(svc.logs()).toContain('/signin/verify?token=%5BRedacted%5D');
    expect(svc.logs()).not.toContain(token);
  });

  it('lets exactly one of two simultaneous uses of a link through', async () => {
    const client = new FormClient(svc, ip());
    const { link } = await requestLink(client, email());
    const confirm = await client.get(`${link!.pathname}${link!.search}`);
    const form = { token: link!.searchParams.get('token')!, _csrf: csrfIn(confirm.body, '/signin/verify') };
    const results = await Promise.all([
      client.post('/signin/verify', form),
      client.post('/signin/verify', form),
    ]);
    expect(results.map((r) => r.statusCode).sort()).toEqual([303, 410]);
  });

  it('replaces the browser’s session when it signs in again', async () => {
    const address = email();
    const client = await signIn(svc, address, ip());
    const first = client.cookieHeader();
    const { link } = await requestLink(new FormClient(svc, ip()), address);
    await client.submit(`${link!.pathname}${link!.search}`, '/signin/verify', {
      token: link!.searchParams.get('token')!,
    });
    expect(client.cookieHeader()).not.toBe(first);
    expect((await client.get('/')).statusCode).toBe(200);
    const old = await svc.app.inject({ url: '/', headers: { cookie: first, accept: 'text/html' } });
    expect(old.statusCode).toBe(303);
  });

  it('refuses a reused link with a clear page and no session', async () => {
    const client = new FormClient(svc, ip());
    const { link } = await requestLink(client, email());
    const url = `${link!.pathname}${link!.search}`;
    const token = link!.searchParams.get('token')!;
    const first = await client.submit(url, '/signin/verify', { token });
    expect(first.statusCode).toBe(303);

    const other = new FormClient(svc, ip());
    const page = await other.get(url);
    expect(page.statusCode).toBe(410);
    expect(page.body).toContain('already used');
    const signin = await other.get('/signin');
    const reuse = await other.post('/signin/verify', { token, _csrf: csrfIn(signin.body, '/signin') });
    expect(reuse.statusCode).toBe(410);
    expect(reuse.body).toContain('already used');
    expect(reuse.cookies.find((c) => c.name === 'botpay_session')).toBeUndefined();
  });

  it('refuses a link after 15 minutes', async () => {
    const client = new FormClient(svc, ip());
    const { link } = await requestLink(client, email());
    const url = `${link!.pathname}${link!.search}`;
    const confirm = await client.get(url);
    svc.clock.advance(15 * 60_000 + 1000);
    const late = await client.get(url);
    expect(late.statusCode).toBe(410);
    expect(late.body).toContain('expired');
    const post = await client.post('/signin/verify', {
      token: link!.searchParams.get('token')!,
      _csrf: csrfIn(confirm.body, '/signin/verify'),
    });
    expect(post.statusCode).toBe(410);
    expect(post.body).toContain('expired');
    expect(client.jar.has('botpay_session')).toBe(false);
  });

  it('answers an unknown or malformed token with a friendly 400 page', async () => {
    const client = new FormClient(svc, ip());
    for (const token of ['0'.repeat(64), 'nope', '']) {
      const res = await client.get(`/signin/verify?token=${token}`);
      expect(res.statusCode).toBe(400);
      expect(res.body).toContain('not valid');
    }
  });

  it('rejects a malformed address without sending mail', async () => {
    const client = new FormClient(svc, ip());
    const before = svc.mailer.sent.length;
    const res = await client.submit('/signin', '/signin', { email: 'not an address' });
    expect(res.statusCode).toBe(400);
    expect(res.body).toContain('complete e-mail address');
    expect(svc.mailer.sent.length).toBe(before);
  });

  it('rate limits per e-mail address and per client address', async () => {
    const address = email();
    const before = svc.mailer.sent.length;
    for (let i = 0; i < 5; i++) {
      const res = await new FormClient(svc, `10.30.0.${i + 1}`).submit('/signin', '/signin', {
        email: address,
      });
      expect(res.statusCode).toBe(303);
    }
    const limited = await new FormClient(svc, '10.30.0.99').submit('/signin', '/signin', { email: address });
    expect(limited.statusCode).toBe(429);
    expect(limited.headers['retry-after']).toBeDefined();
    expect(svc.mailer.sent.length - before).toBe(5);

    const client = new FormClient(svc, '10.31.0.1');
    for (let i = 0; i < 20; i++) {
      expect((await client.submit('/signin', '/signin', { email: email() })).statusCode).toBe(303);
    }
    const ipLimited = await client.submit('/signin', '/signin', { email: email() });
    expect(ipLimited.statusCode).toBe(429);
    // The refused request did not count against the fresh address either.
    svc.clock.advance(3600_000 + 1000);
    expect((await client.submit('/signin', '/signin', { email: address })).statusCode).toBe(303);
  });

  it('signs out: the cookie is cleared, the session is dead everywhere, and it is audited', async () => {
    const address = email();
    const client = await signIn(svc, address, ip());
    const stolen = client.cookieHeader();
    const res = await client.submit('/', '/signout');
    expect(res.statusCode).toBe(303);
    expect(res.headers.location).toBe('/signin?signed_out=1');
    const cleared = res.cookies.find((c) => c.name === 'botpay_session')!;
    expect(cleared.value).toBe('');
    expect((await client.get('/signin?signed_out=1')).body).toContain('You are signed out');

    const replay = await svc.app.inject({ url: '/', headers: { cookie: stolen, accept: 'text/html' } });
    expect(replay.statusCode).toBe(303);
    expect(replay.headers.location).toBe('/signin');
    const api = await svc.app.inject({ url: '/api/v1/owner/bots', headers: { cookie: stolen } });
    expect(api.statusCode).toBe(401);
    const audit = await svc.ctx.db.query<{ action: string }>(
      `SELECT a.action FROM audit_log a JOIN owners o ON o.id = a.owner_id WHERE o.email_normalized = $1 ORDER BY a.id`,
      [address],
    );
    expect(audit.map((a) => a.action)).toEqual(['owner.signed_in', 'owner.signed_out']);
  });

  it('ends a session after 7 idle days and after 30 days in all', async () => {
    const client = await signIn(svc, email(), ip());
    svc.clock.advance(6 * 86_400_000);
    expect((await client.get('/')).statusCode).toBe(200);
    svc.clock.advance(6 * 86_400_000);
    expect((await client.get('/')).statusCode).toBe(200);
    svc.clock.advance(7 * 86_400_000 + 1000);
    expect((await client.get('/')).statusCode).toBe(303);

    const busy = await signIn(svc, email(), ip());
    for (let day = 0; day < 30; day += 5) {
      svc.clock.advance(5 * 86_400_000);
      const res = await busy.get('/');
      expect(res.statusCode).toBe(day + 5 < 30 ? 200 : 303);
    }
  });

  it('sends a signed-out owner from a claim link to sign-in and back to the claim', async () => {
    const bot = await registerBot(svc, {
      owner_email: 'claimer@example.com',
      bot_name: 'Grocery <b>Helper</b>',
    });
    const client = new FormClient(svc, ip());
    const claimUrl = `/claim?token=${bot.claim_token}`;
    const first = await client.get(claimUrl);
    expect(first.statusCode).toBe(303);
    expect(first.headers.location).toBe(`/signin?claim_token=${bot.claim_token}`);
    const form = await client.get(String(first.headers.location));
    expect(form.body).toContain('claim your bot');
    const before = svc.mailer.sent.length;
    await client.post('/signin', {
      _csrf: csrfIn(form.body, '/signin'),
      email: 'claimer@example.com',
      claim_token: bot.claim_token!,
    });
    // The claim token rides along encrypted, never in plain text.
    const dump = JSON.stringify(await svc.ctx.db.query('SELECT * FROM magic_links'));
    expect(dump).not.toContain(bot.claim_token!);
    const link = new URL(
      magicLinkIn(svc.mailer.sent.slice(before).find((m) => m.to === 'claimer@example.com')!.text),
    );
    const verify = await client.submit(`${link.pathname}${link.search}`, '/signin/verify', {
      token: link.searchParams.get('token')!,
    });
    expect(verify.headers.location).toBe(claimUrl);
    const claimPage = await client.get(claimUrl);
    expect(claimPage.statusCode).toBe(200);
    expect(claimPage.body).toContain('Claim “Grocery &lt;b&gt;Helper&lt;/b&gt;”?');
    const claimed = await client.post('/claim', {
      _csrf: csrfIn(claimPage.body, '/claim'),
      claim_token: bot.claim_token!,
    });
    expect(claimed.statusCode).toBe(303);
    expect(claimed.headers.location).toBe(`/bots/${bot.bot_id}?notice=claimed`);
    const again = await client.get(claimUrl);
    expect(again.statusCode).toBe(410);
    expect(again.body).toContain('not valid');
  });

  it('never redirects to another site after sign-in', async () => {
    const client = new FormClient(svc, ip());
    for (const next of ['//evil.example/x', 'https://evil.example/', '/\\evil.example']) {
      const page = await client.get(`/signin?next=${encodeURIComponent(next)}`);
      expect(page.body).not.toContain('evil.example');
      const before = svc.mailer.sent.length;
      const address = email();
      await client.post('/signin', { _csrf: csrfIn(page.body, '/signin'), email: address, next });
      const link = new URL(magicLinkIn(svc.mailer.sent.slice(before)[0]!.text));
      const res = await client.submit(`${link.pathname}${link.search}`, '/signin/verify', {
        token: link.searchParams.get('token')!,
      });
      expect(res.headers.location).toBe('/');
      client.jar.delete('botpay_session');
    }
  });
});

describe('development without SMTP_URL', () => {
  it('writes the sign-in link readably to the log, and it works', async () => {
    const dev = await createTestService();
    try {
      dev.ctx.mailer = createMailer({ smtpUrl: undefined, from: 'x@localhost', logger: dev.ctx.logger });
      const client = new FormClient(dev);
      expect((await client.submit('/signin', '/signin', { email: 'dev@example.com' })).statusCode).toBe(303);
      const link = new URL(magicLinkIn(dev.logs()));
      const res = await client.submit(`${link.pathname}${link.search}`, '/signin/verify', {
        token: link.searchParams.get('token')!,
      });
      expect(res.statusCode).toBe(303);
      expect((await client.get('/')).body).toContain('dev@example.com');
    } finally {
      await dev.close();
    }
  });
});

describe('secure cookies behind https', () => {
  it('uses a __Host- cookie with the Secure flag when BASE_URL is https', async () => {
    const https = await createTestService({ env: { BASE_URL: 'https://pay.example.com' } });
    try {
      const client = await signIn(https, 'secure@example.com');
      const cookie = [...client.jar.keys()];
      expect(cookie).toContain('__Host-botpay_session');
      expect(cookie).toContain('__Host-botpay_pre');
      const res = await client.submit('/', '/signout');
      expect(res.statusCode).toBe(303);
      const login = await https.app.inject({ url: '/signin', headers: { accept: 'text/html' } });
      expect(login.cookies.find((c) => c.name === '__Host-botpay_pre')).toMatchObject({
        secure: true,
        httpOnly: true,
        sameSite: 'Lax',
        path: '/',
      });
      // A session cookie is also Secure: sign in again and look at the Set-Cookie of the verify step.
      const c2 = new FormClient(https);
      const before = https.mailer.sent.length;
      await c2.submit('/signin', '/signin', { email: 'secure@example.com' });
      const link = new URL(magicLinkIn(https.mailer.sent[before]!.text));
      expect(link.origin).toBe('https://pay.example.com');
      const verify = await c2.submit(`${link.pathname}${link.search}`, '/signin/verify', {
        token: link.searchParams.get('token')!,
      });
      expect(verify.cookies.find((c) => c.name === '__Host-botpay_session')).toMatchObject({
        secure: true,
        httpOnly: true,
        sameSite: 'Lax',
        path: '/',
      });
    } finally {
      await https.close();
    }
  });
});
