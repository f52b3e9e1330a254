import type { FastifyRequest } from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BOT_KEYS_CHANNEL, createBotAuthenticator } from '../../src/bots/auth.ts';
import { BOT_STATE_CHANNEL, createBotStateCache } from '../../src/bots/stateCache.ts';
import type { AppContext } from '../../src/platform/context.ts';
import { openPostgres } from '../../src/platform/db/postgres.ts';
import { createTestDatabase, isPostgres, POSTGRES_URL, type TestDatabase } from '../support/db.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';

// Status answers are cached per instance (STATUS_CACHE_MS); a long TTL here proves that changes
// invalidate them rather than the clock.
describe('bot status cache', () => {
  let database: TestDatabase;
  let a: TestService;
  let b: TestService;
  beforeAll(async () => {
    database = await createTestDatabase();
    a = await createTestService({ database, env: { STATUS_CACHE_MS: '60000' } });
    // A second instance with its own connection pool on the same database (PostgreSQL), so only
    // NOTIFY can tell the first about its writes; with PGlite one process owns the data.
    if (isPostgres) {
      const db = await openPostgres({ connectionString: POSTGRES_URL, schema: database.schema!, max: 4 });
      b = await createTestService({
        database: { db, drop: () => db.close() },
        env: { STATUS_CACHE_MS: '60000' },
      });
    } else {
      b = a;
    }
  });
  afterAll(async () => {
    await a.close();
    if (b !== a) {
      await b.close();
      await b.database.drop();
    }
    await database.drop();
  });

  async function balanceOn(svc: TestService, auth: Record<string, string>): Promise<number> {
    return (await svc.app.inject({ url: '/api/v1/bot/status', headers: auth })).json().rails.card_wallet
      .balance_usd;
  }

  it('reads its own writes at once', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner, { fundCents: 100 });
    expect(await balanceOn(a, bot.auth)).toBe(1);
    await a.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 100 },
    });
    expect(await balanceOn(a, bot.auth)).toBe(2);
    const wallet = await a.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth });
    expect(wallet.json().balance_usd).toBe(2);
  });

  it('a cached answer is sent as the same bytes and headers as the computed one, and a change replaces them', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner, { fundCents: 100 });
    for (const url of ['/api/v1/bot/status', '/api/v1/bot/wallet/check']) {
      // First: computed and serialised by Fastify; then from the entry, once serialised and once kept.
      const [computed, first, kept] = [
        await a.app.inject({ url, headers: bot.auth }),
        await a.app.inject({ url, headers: bot.auth }),
        await a.app.inject({ url, headers: bot.auth }),
      ];
      for (const res of [first, kept]) {
        expect(res.statusCode).toBe(200);
        expect(res.body).toBe(computed.body);
        expect(res.headers['content-type']).toBe(computed.headers['content-type']);
        expect(res.headers['content-length']).toBe(computed.headers['content-length']);
      }
      expect(computed.headers['content-type']).toBe('application/json; charset=utf-8');
    }
    await a.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 250 },
    });
    // The kept JSON went with the entry: the next answer shows the change.
    expect(await balanceOn(a, bot.auth)).toBe(3.5);
    const wallet = await a.app.inject({ url: '/api/v1/bot/wallet/check', headers: bot.auth });
    expect(wallet.json().balance_usd).toBe(3.5);
  });

  it("sees another instance's change long before the TTL (NOTIFY, not expiry)", async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner, { fundCents: 100 });
    expect(await balanceOn(a, bot.auth)).toBe(1);
    const started = Date.now();
    await b.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
      headers: owner.auth,
    });
    let status = '';
    while (Date.now() - started < 5000) {
      status = (await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).json().status;
      if (status === 'frozen') break;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(status).toBe('frozen');
    // Milliseconds normally; the bound only has to be far below the 60 s TTL on a loaded machine.
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('owner-wide changes (master guardrails) reach every bot of the owner', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner);
    expect(
      (await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).json().master_guardrails
        .daily_budget_usd,
    ).toBe(20);
    await b.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: owner.auth,
      payload: { daily_budget_cents: 4000 },
    });
    const deadline = Date.now() + 2000;
    let daily = 0;
    while (Date.now() < deadline) {
      daily = (await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).json().master_guardrails
        .daily_budget_usd;
      if (daily === 40) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(daily).toBe(40);
  });

  it('a key rotated on one instance stops working on the other within a second', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner);
    expect((await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).statusCode).toBe(200);
    const rotated = await b.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/api-key/rotate`,
      headers: owner.auth,
    });
    expect(rotated.statusCode).toBe(200);
    // The key cache keeps an entry for at most 900 ms: a second later the old key is refused.
    await new Promise((r) => setTimeout(r, 1000));
    expect((await a.app.inject({ url: '/api/v1/bot/status', headers: bot.auth })).statusCode).toBe(401);
  });

  /** Changes a bot's balance without announcing it (as if the notification were lost). */
  async function silentFund(botId: string, cents: number): Promise<void> {
    const sql = 'UPDATE wallets SET available_micros = available_micros + $2 WHERE bot_id = $1';
    if (isPostgres) {
      // A plain client: with botpay.defer_notify on, the trigger only raises a NOTICE nobody sends.
      const client = new pg.Client({
        connectionString: POSTGRES_URL,
        options: `-c search_path=${database.schema} -c botpay.defer_notify=on`,
      });
      await client.connect();
      await client.query(sql, [botId, cents * 10_000]);
      await client.end();
    } else {
      await a.ctx.db.transaction(async (tx) => {
        await tx.exec('SET LOCAL botpay.defer_notify = on');
        await tx.query(sql, [botId, cents * 10_000]);
      });
    }
  }

  it('commits that touch nothing a status shows (job ticks) keep the cached answers', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner, { fundCents: 100 });
    expect(await balanceOn(a, bot.auth)).toBe(1);
    await silentFund(bot.bot_id, 100);
    // Writes through this instance's own database port that no status reads: until 0021 every
    // local commit emptied the whole cache, so job ticks (owner mail, webhook claims) several
    // times a second made most status requests miss.
    await a.ctx.db.query('DELETE FROM checkout_idempotency WHERE created_at < $1', [new Date(0)]);
    await a.ctx.db.transaction(async (tx) => {
      await tx.query("UPDATE events SET owner_mail_at = owner_mail_at WHERE id = 'none'");
    });
    expect(await balanceOn(a, bot.auth)).toBe(1);
    // A change of this bot's wallet, announced: the next answer is fresh (and includes the silent one).
    await a.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/fund`,
      headers: owner.auth,
      payload: { amount_cents: 100 },
    });
    expect(await balanceOn(a, bot.auth)).toBe(3);
  });

  it('the partner wallet columns the status shows announce their changes, before the write returns', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner);
    const heard: string[] = [];
    // Only this bot's keys: another instance's earlier writes may still be arriving.
    const unlisten = await a.ctx.db.listen(BOT_STATE_CHANNEL, (p) =>
      heard.push(...p.split(',').filter((k) => k === `bot:${bot.bot_id}`)),
    );
    try {
      await a.ctx.db.query(
        `INSERT INTO x402_wallets (bot_id, network, asset, address, key_enc, key_source, created_at, updated_at)
         VALUES ($1, 'base-sepolia', 'USDC', '0x0000000000000000000000000000000000000001', 'x', 'generated', now(), now())`,
        [bot.bot_id],
      );
      expect(heard).toEqual([`bot:${bot.bot_id}`]);
      heard.length = 0;
      // The money projections are not part of the status: silent.
      await a.ctx.db.query('UPDATE x402_wallets SET held_micros = held_micros WHERE bot_id = $1', [
        bot.bot_id,
      ]);
      expect(heard).toEqual([]);
      await a.ctx.db.query(
        'UPDATE x402_wallets SET chain_balance_micro = 5, balance_read_at = now() WHERE bot_id = $1',
        [bot.bot_id],
      );
      expect(heard).toEqual([`bot:${bot.bot_id}`]);
    } finally {
      await unlisten();
    }
  });

  it('a statement that changes the events of hundreds of bots announces every bot to the other instance', async () => {
    // Event changes are announced per statement (0025): each bot once, in payloads of at most 200
    // keys. One payload with every key would be refused by PostgreSQL (over 8,000 bytes): on the
    // embedded database the UPDATE itself would fail, on PostgreSQL the other instance would not
    // hear it.
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner);
    const n = 450;
    const prefix = `bot_bulk${Math.random().toString(36).slice(2, 8)}`;
    await a.ctx.db.transaction(async (tx) => {
      await tx.query(
        `INSERT INTO bots
         SELECT (jsonb_populate_record(b, jsonb_build_object(
                  'id', $2 || g, 'name', $2 || g, 'api_key_hash', md5($2 || g), 'claim_token_hash', null,
                  'tunnel_token_hash', null))).*
           FROM bots b, generate_series(1, $3::int) g WHERE b.id = $1`,
        [bot.bot_id, prefix, n],
      );
      await tx.query(
        `INSERT INTO events (id, bot_id, type, body, created_at)
         SELECT 'evt_' || id, id, 'wallet.funded', '{}', now() FROM bots WHERE id LIKE $1 || '%'`,
        [prefix],
      );
    });
    const heard = new Set<string>();
    const unlisten = await b.ctx.db.listen(BOT_STATE_CHANNEL, (p) => {
      for (const k of p.split(',')) if (k.startsWith(`bot:${prefix}`)) heard.add(k);
    });
    try {
      await a.ctx.db.query(`UPDATE events SET acked_at = now() WHERE bot_id LIKE $1 || '%'`, [prefix]);
      for (let i = 0; i < 100 && heard.size < n; i++) await new Promise((r) => setTimeout(r, 50));
      expect(heard.size).toBe(n);
    } finally {
      await unlisten();
    }
  });

  it('a rotated key stops working on another instance through NOTIFY, not expiry', async () => {
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner);
    // An authenticator of "instance b" whose entries would live a minute: only the announcement
    // on botpay_bot_keys can make it refuse the old key in time.
    const auth = createBotAuthenticator(b.ctx as AppContext, { ttlMs: 60_000 });
    const unlisten = await auth.ready;
    try {
      const request = { headers: { authorization: `Bearer ${bot.api_key}` } } as unknown as FastifyRequest;
      expect((await auth.authenticate(request)).id).toBe(bot.bot_id);
      expect(auth.size).toBe(1);
      const started = Date.now();
      const rotated = await a.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/api-key/rotate`,
        headers: owner.auth,
      });
      expect(rotated.statusCode).toBe(200);
      let refused = false;
      while (!refused && Date.now() - started < 10_000) {
        refused = await auth.authenticate(request).then(
          () => false,
          () => true,
        );
        if (!refused) await new Promise((r) => setTimeout(r, 10));
      }
      expect(refused).toBe(true);
      const fresh = {
        headers: { authorization: `Bearer ${rotated.json().api_key}` },
      } as unknown as FastifyRequest;
      expect((await auth.authenticate(fresh)).id).toBe(bot.bot_id);
    } finally {
      await unlisten();
    }
  });
});

describe('API-key cache', () => {
  const KEY = `svc_live_${'a'.repeat(48)}`;
  function fakeDb(lookup: (hash: string) => Promise<Array<{ id: string }>>) {
    let handler: ((payload: string) => void) | undefined;
    let queries = 0;
    const db = {
      query: async (_sql: string, params: unknown[]) => {
        queries++;
        return lookup(params[0] as string);
      },
      listen: async (channel: string, fn: (payload: string) => void) => {
        expect(channel).toBe(BOT_KEYS_CHANNEL);
        handler = fn;
        return async () => {};
      },
    };
    return {
      ctx: { db } as unknown as AppContext,
      notify: (payload: string) => handler?.(payload),
      queries: () => queries,
    };
  }
  const req = (key: string) => ({ headers: { authorization: `Bearer ${key}` } }) as unknown as FastifyRequest;

  it('concurrent requests with one key cost one lookup; later ones none', async () => {
    const f = fakeDb(async () => [{ id: 'bot_1' }]);
    const auth = createBotAuthenticator(f.ctx, { ttlMs: 60_000 });
    await auth.ready;
    const bots = await Promise.all(Array.from({ length: 20 }, () => auth.authenticate(req(KEY))));
    expect(bots.every((b) => b.id === 'bot_1')).toBe(true);
    await auth.authenticate(req(KEY));
    expect(f.queries()).toBe(1);
  });

  it('unknown keys are never cached: each guess costs a lookup, and the cache does not grow', async () => {
    const f = fakeDb(async () => []);
    const auth = createBotAuthenticator(f.ctx, { ttlMs: 60_000 });
    for (let i = 0; i < 5; i++)
      await expect(auth.authenticate(req(KEY))).rejects.toMatchObject({ status: 401 });
    expect(f.queries()).toBe(5);
    expect(auth.size).toBe(0);
  });

  it('holds at most maxEntries keys', async () => {
    const f = fakeDb(async (hash) => [{ id: `bot_${hash.slice(0, 8)}` }]);
    const auth = createBotAuthenticator(f.ctx, { ttlMs: 60_000, maxEntries: 3 });
    for (let i = 0; i < 10; i++) await auth.authenticate(req(`svc_live_${i.toString(16).repeat(48)}`));
    expect(auth.size).toBe(3);
  });

  it('a key change announced while the lookup runs is not cached over', async () => {
    let release: (() => void) | undefined;
    const f = fakeDb(
      () =>
        new Promise((resolve) => {
          release = () => resolve([{ id: 'bot_1' }]);
        }),
    );
    const auth = createBotAuthenticator(f.ctx, { ttlMs: 60_000 });
    const first = auth.authenticate(req(KEY));
    await new Promise((r) => setTimeout(r, 0));
    // The rotation commits (and is announced) after the lookup read the old row.
    f.notify('bot_1');
    release!();
    expect((await first).id).toBe('bot_1');
    expect(auth.size).toBe(0);
    // A request after the announcement did not join the old lookup: it looks up again.
    const second = auth.authenticate(req(KEY));
    await new Promise((r) => setTimeout(r, 0));
    release!();
    await second;
    expect(f.queries()).toBe(2);
    // '*' (the listening connection was re-established): everything goes.
    expect(auth.size).toBe(1);
    f.notify('*');
    expect(auth.size).toBe(0);
  });
});

describe('status cache entries', () => {
  async function cacheWithTtl(ttl: number) {
    const ctx = {
      config: { statusCacheMs: ttl },
      db: { listen: async () => async () => {} },
    } as unknown as AppContext;
    return createBotStateCache(ctx);
  }

  it('are refreshed in the background in the last quarter of their life, never served older than the TTL', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(1_000_000);
      const cache = await cacheWithTtl(1000);
      let computed = 0;
      const compute = async () => ({ value: ++computed, ownerId: null });
      expect(await cache.get('status', 'bot_1', compute)).toBe(1);
      vi.setSystemTime(1_000_700);
      expect(await cache.get('status', 'bot_1', compute)).toBe(1);
      expect(computed).toBe(1);
      // 800 ms: served from the cache, and a refresh starts.
      vi.setSystemTime(1_000_800);
      expect(await cache.get('status', 'bot_1', compute)).toBe(1);
      expect(computed).toBe(2);
      await new Promise((r) => setTimeout(r, 0));
      expect(await cache.get('status', 'bot_1', compute)).toBe(2);
      // The refreshed entry lives from when its computation started.
      vi.setSystemTime(1_001_801);
      expect(await cache.get('status', 'bot_1', compute)).toBe(3);
    } finally {
      vi.useRealTimers();
    }
  });

  it('peek answers a fresh entry without a promise, refreshes it in its last quarter, and never serves it past the TTL', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(3_000_000);
      const cache = await cacheWithTtl(1000);
      let computed = 0;
      const compute = async (botId: string) => ({ value: `${botId}:${++computed}`, ownerId: null });
      expect(cache.peek('status', 'bot_1', compute)).toBeUndefined();
      expect(computed).toBe(0);
      expect(await cache.get('status', 'bot_1', compute)).toBe('bot_1:1');
      const hit = cache.peek('status', 'bot_1', compute);
      expect(hit?.value).toBe('bot_1:1');
      // What a route keeps with the entry (its JSON text) is handed out again with it.
      if (hit) hit.json = '"kept"';
      expect(cache.peek('status', 'bot_1', compute)?.json).toBe('"kept"');
      vi.setSystemTime(3_000_800);
      expect(cache.peek('status', 'bot_1', compute)?.value).toBe('bot_1:1');
      expect(computed).toBe(2);
      await new Promise((r) => setTimeout(r, 0));
      // The refreshed entry is a new one: the old JSON text is not sent with the new value.
      expect(cache.peek('status', 'bot_1', compute)).toMatchObject({ value: 'bot_1:2', json: undefined });
      vi.setSystemTime(3_001_801);
      expect(cache.peek('status', 'bot_1', compute)).toBeUndefined();
      cache.invalidate('bot:bot_1');
      expect(cache.peek('status', 'bot_1', compute)).toBeUndefined();
    } finally {
      vi.useRealTimers();
    }
  });

  it('a change announced while a refresh runs is not cached over', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(2_000_000);
      const cache = await cacheWithTtl(1000);
      let release: ((v: { value: number; ownerId: null }) => void) | undefined;
      let computed = 0;
      const compute = () => {
        computed++;
        if (computed === 1) return Promise.resolve({ value: 1, ownerId: null });
        return new Promise<{ value: number; ownerId: null }>((resolve) => {
          release = resolve;
        });
      };
      expect(await cache.get('status', 'bot_1', compute)).toBe(1);
      vi.setSystemTime(2_000_900);
      expect(await cache.get('status', 'bot_1', compute)).toBe(1);
      cache.invalidate('bot:bot_1');
      release!({ value: 2, ownerId: null });
      await new Promise((r) => setTimeout(r, 0));
      // Nothing cached: the next read computes again.
      const next = cache.get('status', 'bot_1', async () => ({ value: 3, ownerId: null }));
      expect(await next).toBe(3);
    } finally {
      vi.useRealTimers();
    }
  });
});
