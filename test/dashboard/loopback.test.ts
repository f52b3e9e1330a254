import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loopbackAliases } from '../../src/dashboard/routes.ts';
import { createLogger } from '../../src/platform/logger.ts';
import { createMailer } from '../../src/platform/mailer.ts';
import { isPostgres } from '../support/db.ts';
import { type ServiceProcess, startServiceProcess } from '../support/process.ts';
import { createTestService, type TestService } from '../support/service.ts';
import { csrfIn, FormClient } from './browserless.ts';

// Issue 15 item 3: the address in the log and the address in BASE_URL. In development
// (BASE_URL on localhost) the other spellings of loopback are sent to BASE_URL; a form from any
// other origin is refused with a page that names both addresses; without SMTP_URL the sign-in link
// is printed as one plain line.

describe('loopback aliases of a development BASE_URL', () => {
  it('lists the other spellings of the same address and port, and nothing for a public BASE_URL', () => {
    expect([...(loopbackAliases('http://localhost:8080') ?? [])].sort()).toEqual([
      '127.0.0.1:8080',
      '[::1]:8080',
    ]);
    expect([...(loopbackAliases('http://127.0.0.1:3000') ?? [])].sort()).toEqual([
      '[::1]:3000',
      'localhost:3000',
    ]);
    expect(loopbackAliases('https://pay.example.com')).toBeUndefined();
    expect(loopbackAliases('http://192.168.1.5:8080')).toBeUndefined();
  });
});

describe('dashboard opened at another loopback address (in-process)', () => {
  let dev: TestService;
  let prod: TestService;
  beforeAll(async () => {
    dev = await createTestService(); // BASE_URL=http://localhost:8080
    prod = await createTestService({ env: { BASE_URL: 'https://pay.example.com' } });
  });
  afterAll(async () => {
    await dev.close();
    await prod.close();
  });

  it('GET on 127.0.0.1 or [::1] with the same port is redirected to BASE_URL, path kept', async () => {
    for (const host of ['127.0.0.1:8080', '[::1]:8080']) {
      const res = await dev.app.inject({ method: 'GET', url: '/signin?next=%2Fpairing', headers: { host } });
      expect(res.statusCode, host).toBe(307);
      expect(res.headers.location).toBe('http://localhost:8080/signin?next=%2Fpairing');
    }
    // BASE_URL's own host, another port and the JSON API are left alone.
    expect(
      (await dev.app.inject({ method: 'GET', url: '/signin', headers: { host: 'localhost:8080' } }))
        .statusCode,
    ).toBe(200);
    expect(
      (await dev.app.inject({ method: 'GET', url: '/signin', headers: { host: '127.0.0.1:9999' } }))
        .statusCode,
    ).toBe(200);
    const api = await dev.app.inject({
      method: 'GET',
      url: '/api/v1/owner/bots',
      headers: { host: '127.0.0.1:8080' },
    });
    expect(api.statusCode).toBe(401);
  });

  it('a public BASE_URL redirects nobody', async () => {
    const res = await prod.app.inject({ method: 'GET', url: '/signin', headers: { host: '127.0.0.1:8080' } });
    expect(res.statusCode).toBe(200);
  });

  it('in development a form posted from a loopback alias is accepted (the CSRF token still decides)', async () => {
    const client = new FormClient(dev, '10.77.0.1');
    const page = await client.get('/signin');
    const res = await client.post(
      '/signin',
      { _csrf: csrfIn(page.body, '/signin'), email: 'alias@example.com' },
      { origin: 'http://127.0.0.1:8080' },
    );
    expect(res.statusCode).toBe(303);
    const forged = await client.post(
      '/signin',
      { _csrf: 'not-the-token', email: 'alias@example.com' },
      { origin: 'http://127.0.0.1:8080' },
    );
    expect(forged.statusCode).toBe(403);
  });

  it('a form from any other origin is refused with a page naming the address used and BASE_URL', async () => {
    const client = new FormClient(dev, '10.77.0.2');
    const page = await client.get('/signin');
    const res = await client.post(
      '/signin',
      { _csrf: csrfIn(page.body, '/signin'), email: 'x@example.com' },
      { origin: 'http://192.168.1.20:8080' },
    );
    expect(res.statusCode).toBe(403);
    expect(res.body).toContain('Wrong address for this service');
    expect(res.body).toContain('http://192.168.1.20:8080');
    expect(res.body).toContain('http://localhost:8080');
    expect(res.body).toContain('BASE_URL');
    // A hostile origin is shown as text, never as markup.
    const evil = await client.post(
      '/signin',
      { _csrf: csrfIn(page.body, '/signin'), email: 'x@example.com' },
      { origin: 'http://"><script>x</script>' },
    );
    expect(evil.statusCode).toBe(403);
    expect(evil.body).not.toContain('<script>x');
    const prodClient = new FormClient(prod, '10.77.0.3');
    const prodPage = await prodClient.get('/signin');
    const wrong = await prodClient.post(
      '/signin',
      { _csrf: csrfIn(prodPage.body, '/signin'), email: 'x@example.com' },
      { origin: 'http://10.0.0.5:8080' },
    );
    expect(wrong.statusCode).toBe(403);
    expect(wrong.body).toContain('https://pay.example.com');
    // Nothing was sent for refused forms.
    expect(dev.mailer.sent.filter((m) => m.to === 'x@example.com')).toHaveLength(0);
  });
});

describe('development mail notice', () => {
  it('prints the sign-in line on its own, with control characters of the address neutralised', async () => {
    let printed = '';
    const out = new Writable({
      write(chunk, _e, done) {
        printed += String(chunk);
        done();
      },
    });
    const logs = new Writable({ write: (_c, _e, done) => done() });
    const mailer = createMailer({
      smtpUrl: undefined,
      from: 'x',
      logger: createLogger('info', logs),
      noticeStream: out,
    });
    await mailer.send({
      to: 'a@b.example',
      subject: 's',
      text: 't',
      devNotice: 'Sign-in link for a\u001b[2Jb: http://x',
    });
    await mailer.send({ to: 'a@b.example', subject: 'no notice', text: 't' });
    expect(printed).toBe('Sign-in link for a?[2Jb: http://x\n');
  });
});

describe.runIf(!isPostgres)(
  'a real service started as npm start does, opened at the address the log shows',
  () => {
    let svc: ServiceProcess;
    let dataDir: string;
    beforeAll(async () => {
      dataDir = await mkdtemp(join(tmpdir(), 'botpay-loopback-'));
      svc = await startServiceProcess({ LOG_LEVEL: 'info', DATA_DIR: dataDir });
    });
    afterAll(async () => {
      svc?.child.kill('SIGTERM');
      await svc?.exited;
      await rm(dataDir, { recursive: true, force: true });
    });

    it('prints "Dashboard: <BASE_URL>" and the sign-in link as plain lines, and signing in from 127.0.0.1 works', async () => {
      const base = `http://localhost:${svc.port}`;
      for (let i = 0; i < 50 && !svc.output().includes('SMTP_URL is not set'); i++)
        await new Promise((r) => setTimeout(r, 100));
      expect(svc.output()).toContain(`Dashboard: ${base}\n`);
      expect(svc.output()).toContain('SMTP_URL is not set: sign-in links are printed here');
      // A tiny browser: follows redirects by hand, keeps cookies per host.
      const jar = new Map<string, string>();
      const go = async (url: string, init: RequestInit = {}) => {
        const host = new URL(url).host;
        const res = await fetch(url, {
          ...init,
          redirect: 'manual',
          headers: { ...(init.headers as Record<string, string>), cookie: jar.get(host) ?? '' },
        });
        const set = res.headers.getSetCookie().map((c) => c.split(';')[0]);
        if (set.length) jar.set(host, [jar.get(host), ...set].filter(Boolean).join('; '));
        return res;
      };
      const first = await go(`http://127.0.0.1:${svc.port}/signin`);
      expect(first.status).toBe(307);
      expect(first.headers.get('location')).toBe(`${base}/signin`);
      const page = await go(first.headers.get('location')!);
      expect(page.status).toBe(200);
      const form = new URLSearchParams({
        _csrf: csrfIn(await page.text(), '/signin'),
        email: 'first@example.com',
      });
      const sent = await go(`${base}/signin`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin: base },
        body: form.toString(),
      });
      expect(sent.status).toBe(303);
      let line: string | undefined;
      for (let i = 0; i < 50 && !line; i++) {
        line = svc
          .output()
          .split('\n')
          .find((l) => l.startsWith('Sign-in link for first@example.com'));
        if (!line) await new Promise((r) => setTimeout(r, 100));
      }
      expect(line).toMatch(
        new RegExp(
          `^Sign-in link for first@example\\.com \\(works once, for 15 minutes\\): ${base}/signin/verify\\?token=[0-9a-f]{64}$`,
        ),
      );
      const link = line!.slice(line!.indexOf(base));
      const confirm = await go(link);
      expect(confirm.status).toBe(200);
      const verified = await go(`${base}/signin/verify`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin: base },
        body: new URLSearchParams({
          _csrf: csrfIn(await confirm.text(), '/signin/verify'),
          token: new URL(link).searchParams.get('token')!,
        }).toString(),
      });
      expect(verified.status).toBe(303);
      const home = await go(`${base}/`);
      expect(home.status).toBe(200);
      expect(await home.text()).toContain('first@example.com');
    });
  },
);
