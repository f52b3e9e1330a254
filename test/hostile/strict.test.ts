import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkout, counter, purchase, setupCard } from '../checkout/helpers.ts';
import { activeBot, createOwner, createTestService, nextIp, type TestService } from '../support/service.ts';

// Strict-client departures (issue 14): the Bearer scheme in any case, invalid_profile for an index
// outside 1–6, unknown checkout fields refused, Retry-After on every 429, and a NUL byte in any
// string a 400 that changes nothing (PostgreSQL refuses to store it; that must not be a 500).

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '5' } });
});
afterAll(async () => {
  await svc.close();
});

const AUTO = { approval_mode: 'auto_approve_under_threshold', approval_threshold_cents: 10_000 };

describe('strict clients', () => {
  it('accepts the Bearer scheme in any case, on the bot and the owner API', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    for (const scheme of ['bearer', 'BEARER', 'Bearer']) {
      const status = await svc.app.inject({
        url: '/api/v1/bot/status',
        headers: { authorization: `${scheme} ${bot.api_key}` },
      });
      expect(status.statusCode, scheme).toBe(200);
      const bots = await svc.app.inject({
        url: '/api/v1/owner/bots',
        headers: { authorization: `${scheme} ${owner.token}` },
      });
      expect(bots.statusCode, scheme).toBe(200);
    }
    expect(
      (
        await svc.app.inject({
          url: '/api/v1/bot/status',
          headers: { authorization: `Basic ${bot.api_key}` },
        })
      ).statusCode,
    ).toBe(401);
  });

  it('profile_index outside 1–6 is 400 invalid_profile; unknown fields are 400 validation_error; nothing changes', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    for (const index of [0, 7, -1, 2_000_000_000]) {
      const res = await checkout(svc, bot, purchase(index, 100));
      expect(res.statusCode, String(index)).toBe(400);
      expect(res.json().error, String(index)).toBe('invalid_profile');
    }
    const fractional = await checkout(svc, bot, purchase(1.5, 100));
    expect(fractional.json().error).toBe('validation_error');
    const jpy = await checkout(svc, bot, { ...purchase(card.real_profile_index, 100), currency: 'JPY' });
    expect(jpy.statusCode).toBe(400);
    expect(jpy.json().error).toBe('validation_error');
    expect(await counter(svc, `bot:${bot.bot_id}`, 'month')).toBe(0);
  });

  it('every 429 carries Retry-After equal to retry_after_seconds (checkout, registration)', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    let limited: Awaited<ReturnType<typeof checkout>> | undefined;
    for (let i = 0; i < 10 && !limited; i++) {
      const res = await checkout(svc, bot, purchase(card.real_profile_index, 10));
      if (res.statusCode === 429) limited = res;
    }
    expect(limited).toBeDefined();
    expect(limited!.json().retry_after_seconds).toBeGreaterThan(0);
    expect(limited!.headers['retry-after']).toBe(String(limited!.json().retry_after_seconds));
    const ip = nextIp();
    let reg: Awaited<ReturnType<typeof svc.app.inject>> | undefined;
    for (let i = 0; i < 10 && !reg; i++) {
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bots/register',
        remoteAddress: ip,
        payload: { bot_name: `r${i}`, owner_email: 'o@example.com', callback_url: 'http://127.0.0.1:9/h' },
      });
      if (res.statusCode === 429) reg = res;
    }
    expect(reg).toBeDefined();
    expect(reg!.headers['retry-after']).toBe(String(reg!.json().retry_after_seconds));
  });

  it('a NUL byte in any string is 400, never 500, and stores nothing', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    const attempts = [
      checkout(svc, bot, purchase(card.real_profile_index, 100, { merchant_name: 'Acme\u0000' })),
      checkout(svc, bot, purchase(card.real_profile_index, 100, { item_name: '\u0000' })),
      checkout(svc, bot, { ...purchase(card.real_profile_index, 100), category: 'x\u0000' }),
      svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/cards`,
        headers: owner.auth,
        payload: { label: 'card\u0000' },
      }),
    ];
    for (const res of await Promise.all(attempts)) {
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json().error).toBe('validation_error');
    }
    expect(await counter(svc, `bot:${bot.bot_id}`, 'month')).toBe(0);
    const bots = await svc.ctx.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM bots WHERE name LIKE 'nul%'`,
    );
    expect(bots[0]!.n).toBe(0);
  });

  it('refused checkouts count toward the hourly limit: a bot cannot probe its guardrails without end', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    // Limit 5 an hour here: five refusals (over the card's per-purchase limit), then 429.
    for (let i = 0; i < 5; i++) {
      const refused = await checkout(svc, bot, purchase(card.real_profile_index, 600));
      expect(refused.statusCode).toBe(403);
    }
    const next = await checkout(svc, bot, purchase(card.real_profile_index, 100));
    expect(next.statusCode).toBe(429);
    expect(await counter(svc, `bot:${bot.bot_id}`, 'month')).toBe(0);
  });

  it('a bot name with line breaks cannot add lines to the claim e-mail the service sends', async () => {
    const before = svc.mailer.sent.length;
    const res = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bots/register',
      remoteAddress: nextIp(),
      payload: {
        bot_name:
          'Helper\r\nBcc: victim@example.com\r\n\r\nYour account is locked, log in at http://phish.example',
        description: 'line one\nline two',
        owner_email: 'target@example.com',
        callback_url: 'http://127.0.0.1:9/h',
      },
    });
    expect(res.statusCode).toBe(201);
    const bot = (
      await svc.ctx.db.query<{ name: string; description: string }>(
        'SELECT name, description FROM bots WHERE id = $1',
        [res.json().bot_id],
      )
    )[0]!;
    expect(bot.name).toBe(
      'Helper Bcc: victim@example.com Your account is locked, log in at http://phish.example',
    );
    expect(bot.description).toBe('line one line two');
    const mail = svc.mailer.sent.slice(before).find((m) => m.to === 'target@example.com')!;
    expect(mail.subject).not.toMatch(/[\r\n]/);
    // The name stays on the one quoted line it is given.
    expect(mail.text.split('\n').filter((l) => l.includes('phish.example'))).toHaveLength(1);
    expect(mail.text).not.toMatch(/^Bcc:/m);
  });

  it('/metrics: checkout decisions are counted; with METRICS_TOKEN it needs that bearer token', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, bot.bot_id, AUTO);
    const value = async () => {
      const text = (await svc.app.inject({ url: '/metrics' })).body;
      return Number(/botpay_checkout_decisions_total\{outcome="approved"\} (\d+)/.exec(text)?.[1] ?? 0);
    };
    const before = await value();
    expect((await checkout(svc, bot, purchase(card.decoyIndex, 100))).statusCode).toBe(200);
    expect(await value()).toBe(before + 1);

    const guarded = await createTestService({ env: { METRICS_TOKEN: 'metrics-token-0123456789abcdef' } });
    try {
      expect((await guarded.app.inject({ url: '/metrics' })).statusCode).toBe(401);
      expect(
        (
          await guarded.app.inject({
            url: '/metrics',
            headers: { authorization: 'Bearer wrong-token-0123456789' },
          })
        ).statusCode,
      ).toBe(401);
      const ok = await guarded.app.inject({
        url: '/metrics',
        headers: { authorization: 'Bearer metrics-token-0123456789abcdef' },
      });
      expect(ok.statusCode).toBe(200);
      expect(ok.body).toContain('botpay_checkout_decisions_total');
    } finally {
      await guarded.close();
    }
  });

  it('behind a trusted proxy, a client cannot pick its own rate-limit key with X-Forwarded-For', async () => {
    // nginx's $proxy_add_x_forwarded_for appends the real client to whatever the client sent.
    const proxied = await createTestService({
      env: { TRUST_PROXY: 'true', REGISTRATION_RATE_LIMIT_PER_HOUR: '3' },
    });
    try {
      const codes: number[] = [];
      for (let i = 0; i < 6; i++) {
        const res = await proxied.app.inject({
          method: 'POST',
          url: '/api/v1/bots/register',
          remoteAddress: '127.0.0.1', // the proxy
          headers: { 'x-forwarded-for': `198.51.100.${i}, 203.0.113.7` }, // spoofed, then the real client
          payload: {
            bot_name: `spoof-${i}`,
            owner_email: 'o@example.com',
            callback_url: 'http://127.0.0.1:9/h',
          },
        });
        codes.push(res.statusCode);
      }
      // Keyed by the address the proxy appended (203.0.113.7): three, then refused.
      expect(codes).toEqual([201, 201, 201, 429, 429, 429]);
    } finally {
      await proxied.close();
    }
  });
});
