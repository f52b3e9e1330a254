import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLoopbackAddress } from '../../src/bots/register.ts';
import { DEVELOPMENT_LOOPBACK_REGISTRATIONS_PER_HOUR } from '../../src/config.ts';
import { sha256Hex } from '../../src/platform/crypto.ts';
import { isPostgres } from '../support/db.ts';
import { createOwner, createTestService, nextIp, registerBot, type TestService } from '../support/service.ts';

async function countRows(svc: TestService) {
  const rows = await svc.ctx.db.query<{ bots: number; wallets: number; events: number; hits: number }>(
    `SELECT (SELECT count(*)::int FROM bots) AS bots, (SELECT count(*)::int FROM wallets) AS wallets,
            (SELECT count(*)::int FROM events) AS events, (SELECT coalesce(sum(cardinality(hits)), 0)::int FROM rate_limits) AS hits`,
  );
  return rows[0]!;
}

describe('POST /api/v1/bots/register', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => {
    await svc.close();
  });

  const post = (payload: unknown, ip = nextIp(), headers: Record<string, string> = {}) =>
    svc.app.inject({
      method: 'POST',
      url: '/api/v1/bots/register',
      payload: payload as object,
      remoteAddress: ip,
      headers,
    });

  it('variant (a): without pairing code → pending, claim token and verification URL', async () => {
    const res = await post({
      bot_name: 'alpha',
      owner_email: 'a@example.com',
      callback_url: 'https://bot.example.com/hook',
    });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body).toMatchObject({ status: 'pending_owner_verification' });
    expect(body.bot_id).toMatch(/^bot_[a-z2-7]{16}$/);
    expect(body.api_key).toMatch(/^svc_live_[0-9a-f]{48}$/);
    expect(body.webhook_secret).toMatch(/^whsec_[0-9a-f]{48}$/);
    expect(body.owner_verification_url).toBe(`http://localhost:8080/claim?token=${body.claim_token}`);
    expect(typeof body.webhook_note).toBe('string');
    expect(typeof body.important).toBe('string');
    expect(body).not.toHaveProperty('paired');
    expect(body).not.toHaveProperty('tunnel_token');
    // Secrets are stored hashed or encrypted, never in the clear.
    const row = (
      await svc.ctx.db.query<Record<string, string>>('SELECT * FROM bots WHERE id = $1', [body.bot_id])
    )[0]!;
    expect(row.api_key_hash).toBe(sha256Hex(body.api_key));
    expect(row.claim_token_hash).toBe(sha256Hex(body.claim_token));
    expect(JSON.stringify(row)).not.toContain(body.api_key);
    expect(JSON.stringify(row)).not.toContain(body.webhook_secret);
    expect(svc.ctx.secrets.decrypt(row.webhook_secret_enc!)).toBe(body.webhook_secret);
    // The owner is told where to claim; the mail is addressed to the registration's owner_email.
    expect(svc.mailer.sent.at(-1)).toMatchObject({ to: 'a@example.com' });
    expect(svc.mailer.sent.at(-1)?.text).toContain(body.owner_verification_url);
  });

  it('variant (b): with a pairing code → active, paired, owner_uid, no claim token; the code is single use', async () => {
    const owner = await createOwner(svc);
    const code = (
      await svc.app.inject({ method: 'POST', url: '/api/v1/owner/pairing-codes', headers: owner.auth })
    ).json().pairing_code as string;
    const dashed = `${code.slice(0, 3)}-${code.slice(3)}`;
    const res = await post({
      bot_name: 'paired',
      owner_email: owner.email,
      callback_url: 'https://x.example.com/h',
      pairing_code: dashed,
    });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body).toMatchObject({ status: 'active', paired: true, owner_uid: owner.id, claim_token: null });
    expect(body.webhook_secret).toMatch(/^whsec_/);
    expect(body).not.toHaveProperty('owner_verification_url');
    const status = await svc.app.inject({
      url: '/api/v1/bot/status',
      headers: { authorization: `Bearer ${body.api_key}` },
    });
    expect(status.json().status).toBe('active');
    const events = await svc.ctx.db.query<{ type: string }>('SELECT type FROM events WHERE bot_id = $1', [
      body.bot_id,
    ]);
    expect(events.map((e) => e.type)).toEqual(['wallet.activated']);
    // The owner's activity log says how the bot became theirs.
    const log = await svc.ctx.db.query<{ action: string; owner_id: string }>(
      'SELECT action, owner_id FROM audit_log WHERE bot_id = $1',
      [body.bot_id],
    );
    expect(log).toEqual([{ action: 'bot.paired', owner_id: owner.id }]);

    const again = await post({
      bot_name: 'paired-2',
      owner_email: owner.email,
      pairing_code: code,
      callback_url: 'https://x.example.com/h',
    });
    expect(again.statusCode).toBe(400);
    expect(again.json().error).toBe('invalid_pairing_code');
  });

  it('variant (c): without callback_url → tunnel fields; primary bots get gateway config and hooks token', async () => {
    const res = await post({ bot_name: 'tunnelled', owner_email: 't@example.com' });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    const suffix = body.bot_id.slice(4);
    expect(body.webhook_url).toBe(`http://bot-${suffix}.tunnel.localhost:8080/hooks/service`);
    expect(body.tunnel_token).toMatch(/^svc_tun_[0-9a-f]{48}$/);
    expect(body.primary_hooks_token).toMatch(/^svc_hooks_[0-9a-f]{48}$/);
    expect(typeof body.primary_hooks_token_note).toBe('string');
    const setup = body.tunnel_setup;
    expect(setup).toMatchObject({
      webhook_url: body.webhook_url,
      tunnel_token: body.tunnel_token,
      local_port: 18789,
      webhook_path: '/hooks/service',
      webhook_headers: { 'X-Service-Signature': 'sha256=<hmac>', 'X-Service-Event': '<event_type>' },
    });
    expect(setup.tunnel_client_command).toBe(
      `BOTPAY_TUNNEL_TOKEN=${body.tunnel_token} botpay tunnel --server http://localhost:8080 --port 18789 --path /hooks/service`,
    );
    expect(setup.steps.length).toBeGreaterThan(2);
    expect(setup.retry_policy).toMatch(/5 times/);
    expect(setup.primary_gateway_config.hooks).toMatchObject({
      enabled: true,
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a reference the gateway expands
      token: '${SERVICE_HOOKS_TOKEN}',
      mappings: [{ match: { path: '/hooks/service' }, deliver: true }],
    });
    expect(JSON.stringify(setup.primary_gateway_config)).not.toContain(body.primary_hooks_token);
    const row = (
      await svc.ctx.db.query<Record<string, string>>('SELECT * FROM bots WHERE id = $1', [body.bot_id])
    )[0]!;
    expect(row.tunnel_token_hash).toBe(sha256Hex(body.tunnel_token));
    expect(svc.ctx.secrets.decrypt(row.hooks_token_enc!)).toBe(body.primary_hooks_token);
    expect(row.webhook_status).toBe('pending');
  });

  it('non-primary tunnel bots get their defaults and neither hooks token nor gateway config', async () => {
    const res = await post({ bot_name: 'other', owner_email: 'o@example.com', bot_type: 'custom' });
    const body = res.json();
    expect(body.tunnel_setup).toMatchObject({ local_port: 8080, webhook_path: '/webhook' });
    expect(body).not.toHaveProperty('primary_hooks_token');
    expect(body.tunnel_setup).not.toHaveProperty('primary_gateway_config');
    const custom = (
      await post({
        bot_name: 'other2',
        owner_email: 'o@example.com',
        bot_type: 'custom',
        local_port: 3000,
        webhook_path: '/in',
      })
    ).json();
    expect(custom.tunnel_setup).toMatchObject({ local_port: 3000, webhook_path: '/in' });
    expect(custom.webhook_url).toMatch(/\/in$/);
  });

  it('409 duplicate_registration for the same name and owner e-mail, compared case-insensitively', async () => {
    const first = await post({
      bot_name: 'dup',
      owner_email: 'Dup@Example.com',
      callback_url: 'https://a.example.com/',
    });
    expect(first.statusCode).toBe(201);
    const before = await countRows(svc);
    const second = await post({
      bot_name: 'dup',
      owner_email: 'dup@example.COM',
      callback_url: 'https://a.example.com/',
    });
    expect(second.statusCode).toBe(409);
    expect(second.json().error).toBe('duplicate_registration');
    expect(await countRows(svc)).toEqual(before);
    const otherOwner = await post({
      bot_name: 'dup',
      owner_email: 'other@example.com',
      callback_url: 'https://a.example.com/',
    });
    expect(otherOwner.statusCode).toBe(201);
  });

  const valid = { bot_name: 'v', owner_email: 'v@example.com', callback_url: 'https://a.example.com/hook' };
  const invalid: Array<[string, Record<string, unknown>]> = [
    ['missing bot_name', { owner_email: 'v@example.com' }],
    ['empty bot_name', { ...valid, bot_name: '' }],
    ['blank bot_name', { ...valid, bot_name: '   ' }],
    ['bot_name of 101 chars', { ...valid, bot_name: 'x'.repeat(101) }],
    ['bot_name not a string', { ...valid, bot_name: 42 }],
    ['missing owner_email', { bot_name: 'v' }],
    ['owner_email without @', { ...valid, owner_email: 'not-an-email' }],
    ['owner_email without domain dot', { ...valid, owner_email: 'a@b' }],
    ['owner_email with spaces', { ...valid, owner_email: 'a b@example.com' }],
    ['description over 500', { ...valid, description: 'd'.repeat(501) }],
    ['relative callback_url', { ...valid, callback_url: '/hook' }],
    ['ftp callback_url', { ...valid, callback_url: 'ftp://example.com/hook' }],
    ['javascript callback_url', { ...valid, callback_url: 'javascript:alert(1)' }],
    ['callback_url with credentials', { ...valid, callback_url: 'https://u:p@example.com/' }],
    ['pairing_code of 5 digits', { ...valid, pairing_code: '12345' }],
    ['pairing_code with letters', { ...valid, pairing_code: '12a456' }],
    ['pairing_code as number', { ...valid, pairing_code: 123456 }],
    ['bot_type over 50', { ...valid, bot_type: 't'.repeat(51) }],
    ['local_port 0', { ...valid, local_port: 0 }],
    ['local_port 65536', { ...valid, local_port: 65536 }],
    ['local_port fractional', { ...valid, local_port: 80.5 }],
    ['local_port as string', { ...valid, local_port: '8080' }],
    ['webhook_path without slash', { ...valid, webhook_path: 'hook' }],
    ['webhook_path over 200', { ...valid, webhook_path: `/${'p'.repeat(200)}` }],
    ['webhook_path with space', { ...valid, webhook_path: '/a b' }],
    ['body is an array', [] as unknown as Record<string, unknown>],
  ];
  it.each(invalid)('400 validation_error: %s, and nothing changes', async (_name, payload) => {
    const before = await countRows(svc);
    const res = await post(payload);
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toBe('validation_error');
    expect(typeof res.json().message).toBe('string');
    expect(await countRows(svc)).toEqual(before);
  });

  it('400 for malformed JSON, 415 for a non-JSON body, 413 for an oversized body', async () => {
    const bad = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bots/register',
      headers: { 'content-type': 'application/json' },
      payload: '{"bot_name":',
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error).toBe('validation_error');
    const text = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bots/register',
      headers: { 'content-type': 'text/plain' },
      payload: 'hello',
    });
    expect(text.statusCode).toBe(400);
    expect(text.json().error).toBe('validation_error');
    const xml = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bots/register',
      headers: { 'content-type': 'application/xml' },
      payload: '<bot/>',
    });
    expect(xml.statusCode).toBe(415);
    expect(xml.json().error).toBe('unsupported_media_type');
    const huge = await post({ ...valid, description: 'x'.repeat(1_100_000) });
    expect(huge.statusCode).toBe(413);
  });

  it('plain-http callbacks are refused outside development', async () => {
    const prod = await createTestService({
      env: { BASE_URL: 'https://pay.example.com', ALLOW_PRIVATE_WEBHOOK_TARGETS: 'false' },
    });
    try {
      const res = await prod.app.inject({
        method: 'POST',
        url: '/api/v1/bots/register',
        payload: { bot_name: 'p', owner_email: 'p@example.com', callback_url: 'http://bot.example.com/hook' },
      });
      expect(res.statusCode).toBe(400);
      expect(res.json().message).toMatch(/https/);
      const ok = await prod.app.inject({
        method: 'POST',
        url: '/api/v1/bots/register',
        payload: { bot_name: 'p', owner_email: 'p@example.com' },
      });
      expect(ok.json().webhook_url).toMatch(/^https:\/\/bot-[a-z2-7]+\.tunnel\.localhost\/hooks\/service$/);
    } finally {
      await prod.close();
    }
  });

  it('400 invalid_pairing_code for unknown and expired codes', async () => {
    const owner = await createOwner(svc);
    const unknown = await post({ ...valid, bot_name: 'pc1', pairing_code: '000000' });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().error).toBe('invalid_pairing_code');
    const code = (
      await svc.app.inject({ method: 'POST', url: '/api/v1/owner/pairing-codes', headers: owner.auth })
    ).json();
    svc.clock.advance(3600_001);
    const expired = await post({ ...valid, bot_name: 'pc2', pairing_code: code.pairing_code });
    expect(expired.json().error).toBe('invalid_pairing_code');
  });

  it('429 after 3 registrations per IP per hour, with retry_after_seconds until the window frees', async () => {
    const ip = nextIp();
    for (let i = 0; i < 3; i++)
      expect((await post({ ...valid, bot_name: `rl-${i}` }, ip)).statusCode).toBe(201);
    svc.clock.advance(600_000); // 10 minutes later
    const before = await countRows(svc);
    const limited = await post({ ...valid, bot_name: 'rl-4' }, ip);
    expect(limited.statusCode).toBe(429);
    expect(limited.json()).toEqual({
      error: 'rate_limited',
      message: expect.any(String),
      retry_after_seconds: 3000,
    });
    expect(await countRows(svc)).toEqual(before);
    // Another address is not affected; failed attempts (400/409) never use up the allowance.
    expect((await post({ ...valid, bot_name: 'rl-other' })).statusCode).toBe(201);
    svc.clock.advance(3000_000);
    expect((await post({ ...valid, bot_name: 'rl-5' }, ip)).statusCode).toBe(201);
  });

  it.runIf(isPostgres)(
    'holds under concurrency: 20 parallel registrations from one address, exactly 3 succeed',
    async () => {
      const ip = nextIp();
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => post({ ...valid, bot_name: `race-${i}` }, ip)),
      );
      const codes = results.map((r) => r.statusCode).sort();
      expect(codes.filter((c) => c === 201)).toHaveLength(3);
      expect(codes.filter((c) => c === 429)).toHaveLength(17);
    },
  );

  it('does not count rejected registrations against the limit', async () => {
    const ip = nextIp();
    for (let i = 0; i < 5; i++)
      expect((await post({ ...valid, owner_email: 'bad' }, ip)).statusCode).toBe(400);
    expect((await post({ ...valid, bot_name: 'after-bad' }, ip)).statusCode).toBe(201);
  });

  it('uses X-Forwarded-For only when TRUST_PROXY is set', async () => {
    const direct = nextIp();
    for (let i = 0; i < 3; i++) {
      const res = await post({ ...valid, bot_name: `xff-${i}` }, direct, {
        'x-forwarded-for': `203.0.113.${i}`,
      });
      expect(res.statusCode).toBe(201);
    }
    // Spoofed headers do not dodge the limit without TRUST_PROXY.
    expect(
      (await post({ ...valid, bot_name: 'xff-4' }, direct, { 'x-forwarded-for': '203.0.113.99' })).statusCode,
    ).toBe(429);

    const proxied = await createTestService({ env: { TRUST_PROXY: 'true' } });
    try {
      const viaProxy = (name: string, client: string) =>
        proxied.app.inject({
          method: 'POST',
          url: '/api/v1/bots/register',
          remoteAddress: '127.0.0.1',
          headers: { 'x-forwarded-for': client },
          payload: { ...valid, bot_name: name },
        });
      for (let i = 0; i < 3; i++) expect((await viaProxy(`p-${i}`, '198.51.100.7')).statusCode).toBe(201);
      expect((await viaProxy('p-4', '198.51.100.7')).statusCode).toBe(429);
      expect((await viaProxy('p-5', '198.51.100.8')).statusCode).toBe(201);
    } finally {
      await proxied.close();
    }
  });

  it('limits wrong pairing-code guesses per address', async () => {
    const ip = nextIp();
    let last = 0;
    for (let i = 0; i < 21; i++) {
      const res = await post({ ...valid, bot_name: `guess-${i}`, pairing_code: String(100000 + i) }, ip);
      last = res.statusCode;
      if (i < 20) expect(res.json().error).toBe('invalid_pairing_code');
    }
    expect(last).toBe(429);
  });

  it('counts wrong pairing-code guesses before checking them: 60 in parallel, 20 checked, 40 refused 429', async () => {
    const ip = nextIp();
    const results = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        post({ ...valid, bot_name: `par-${i}`, pairing_code: String(200000 + i) }, ip),
      ),
    );
    const codes = results.map((r) => r.json().error as string);
    expect(codes.filter((c) => c === 'invalid_pairing_code')).toHaveLength(20);
    expect(codes.filter((c) => c === 'rate_limited')).toHaveLength(40);
    for (const r of results.filter((x) => x.statusCode === 429)) {
      expect(r.headers['retry-after']).toBe(String(r.json().retry_after_seconds));
    }
  });

  it('a valid pairing code does not use up a wrong-guess slot', async () => {
    const ip = nextIp();
    const owner = await createOwner(svc);
    for (let i = 0; i < 19; i++) {
      const res = await post({ ...valid, bot_name: `miss-${i}`, pairing_code: String(300000 + i) }, ip);
      expect(res.json().error).toBe('invalid_pairing_code');
    }
    const code = (
      await svc.app.inject({ method: 'POST', url: '/api/v1/owner/pairing-codes', headers: owner.auth })
    ).json().pairing_code as string;
    const paired = await post(
      { ...valid, bot_name: 'paired-ok', owner_email: owner.email, pairing_code: code },
      ip,
    );
    expect(paired.statusCode, paired.body).toBe(201);
    // One wrong guess is still left.
    expect((await post({ ...valid, bot_name: 'miss-last', pairing_code: '399999' }, ip)).json().error).toBe(
      'invalid_pairing_code',
    );
    expect((await post({ ...valid, bot_name: 'miss-over', pairing_code: '399998' }, ip)).statusCode).toBe(
      429,
    );
  });

  it('registerBot helper sanity: distinct keys per bot', async () => {
    const a = await registerBot(svc);
    const b = await registerBot(svc);
    expect(a.api_key).not.toBe(b.api_key);
  });
});

// Trying the README and the docs on one's own machine registers more than 3 bots in an hour: in
// development (BASE_URL on localhost) with no REGISTRATION_RATE_LIMIT_PER_HOUR set, registrations
// from this machine's loopback address get 100 an hour. Everyone else keeps the tight default, and
// a limit the operator set applies to loopback too.
describe('registration limit for this machine in development', () => {
  const body = (name: string) => ({
    bot_name: name,
    owner_email: 'trial@example.com',
    callback_url: 'https://a.example.com/hook',
  });
  const register = (svc: TestService, name: string, ip: string) =>
    svc.app.inject({ method: 'POST', url: '/api/v1/bots/register', payload: body(name), remoteAddress: ip });

  it('localhost BASE_URL, limit unset: loopback gets 100 an hour, other addresses 3', async () => {
    const svc = await createTestService();
    try {
      expect(svc.ctx.config.registrationRateLimitLoopbackPerHour).toBe(
        DEVELOPMENT_LOOPBACK_REGISTRATIONS_PER_HOUR,
      );
      for (let i = 0; i < 6; i++)
        expect((await register(svc, `local-${i}`, '127.0.0.1')).statusCode).toBe(201);
      expect((await register(svc, 'mapped', '::ffff:127.0.0.1')).statusCode).toBe(201);
      const other = nextIp();
      for (let i = 0; i < 3; i++) expect((await register(svc, `far-${i}`, other)).statusCode).toBe(201);
      expect((await register(svc, 'far-4', other)).statusCode).toBe(429);
      // "127.0.0.1.example.com" or a 127-looking private address is not loopback.
      expect(isLoopbackAddress('10.127.0.1')).toBe(false);
      expect(isLoopbackAddress('::ffff:10.0.0.1')).toBe(false);
      expect(isLoopbackAddress('::1')).toBe(true);
    } finally {
      await svc.close();
    }
  });

  it('a public BASE_URL, or a limit the operator set, applies to loopback as to everyone', async () => {
    const envs: Array<Record<string, string>> = [
      { BASE_URL: 'https://pay.example.com' },
      { REGISTRATION_RATE_LIMIT_PER_HOUR: '2' },
    ];
    for (const env of envs) {
      const svc = await createTestService({ env });
      try {
        const limit = svc.ctx.config.registrationRateLimitPerHour;
        expect(svc.ctx.config.registrationRateLimitLoopbackPerHour).toBe(limit);
        for (let i = 0; i < limit; i++)
          expect((await register(svc, `l-${i}`, '127.0.0.1')).statusCode).toBe(201);
        expect((await register(svc, 'one-more', '127.0.0.1')).statusCode).toBe(429);
      } finally {
        await svc.close();
      }
    }
  });
});

// A callback_url the deliveries would refuse (loopback, private, link-local, localhost names) is
// refused at registration, 400 validation_error naming the field, instead of being accepted and
// failing at every delivery. ALLOW_PRIVATE_WEBHOOK_TARGETS=true (development) accepts them.
describe('callback_url on a private or loopback address', () => {
  it('is refused at registration unless private targets are allowed', async () => {
    const strict = await createTestService({ env: { ALLOW_PRIVATE_WEBHOOK_TARGETS: 'false' } });
    const open = await createTestService();
    try {
      const urls = [
        'http://127.0.0.1:9000/hook',
        'http://localhost:9000/hook',
        'http://bot.localhost/hook',
        'http://[::1]:9000/hook',
        'http://10.1.2.3/hook',
        'http://169.254.169.254/latest',
        'http://[::ffff:127.0.0.1]/hook',
      ];
      for (const [i, url] of urls.entries()) {
        const res = await strict.app.inject({
          method: 'POST',
          url: '/api/v1/bots/register',
          remoteAddress: nextIp(),
          payload: { bot_name: `p-${i}`, owner_email: 'p@example.com', callback_url: url },
        });
        expect(res.statusCode, url).toBe(400);
        expect(res.json()).toMatchObject({ error: 'validation_error' });
        expect(res.json().message).toMatch(
          /^callback_url points at .* where the service does not deliver webhooks/,
        );
        const allowed = await open.app.inject({
          method: 'POST',
          url: '/api/v1/bots/register',
          remoteAddress: nextIp(),
          payload: { bot_name: `p-${i}`, owner_email: 'p@example.com', callback_url: url },
        });
        expect(allowed.statusCode, url).toBe(201);
      }
      // A public address and an ordinary name pass (names are judged at delivery time).
      for (const url of ['https://93.184.215.14/hook', 'https://bot.example.com/hook']) {
        const res = await strict.app.inject({
          method: 'POST',
          url: '/api/v1/bots/register',
          remoteAddress: nextIp(),
          payload: { bot_name: url, owner_email: 'p@example.com', callback_url: url },
        });
        expect(res.statusCode, url).toBe(201);
      }
    } finally {
      await strict.close();
      await open.close();
    }
  });
});
