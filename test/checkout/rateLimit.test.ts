import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../src/platform/db/port.ts';
import { parseConfig } from '../../src/config.ts';
import { pruneExpired } from '../../src/jobs/retention.ts';
import { consumeRateLimit, releaseRateLimit } from '../../src/platform/rateLimit.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

// The shared rate limiter (src/platform/rateLimit.ts, rate_limit_consume): one row per key, holding
// only the requests that can still decide (inside the window, at most `limit`), rewritten in place.

const HOUR = 3600;
const T0 = Date.UTC(2026, 0, 5, 12, 0, 0);

describe('rate limits: one row per key, sliding window', () => {
  let t: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    t = await createTestDatabase();
    db = t.db;
  });
  afterAll(async () => {
    await t.drop();
  });

  const consume = (key: string, limit: number, now: number) =>
    db.transaction((tx) => consumeRateLimit(tx, { key, limit, windowSeconds: HOUR, now }));
  const hits = async (key: string) =>
    (await db.query<{ hits: Date[] }>('SELECT hits FROM rate_limits WHERE key = $1', [key]))[0]?.hits.map(
      (d) => new Date(d).getTime(),
    );

  it('counts `limit` requests in any window, answers the exact wait, keeps at most `limit` hits', async () => {
    const key = 'test:sliding';
    expect(await consume(key, 3, T0)).toEqual({ ok: true });
    expect(await consume(key, 3, T0 + 600_000)).toEqual({ ok: true });
    expect(await consume(key, 3, T0 + 1_200_000)).toEqual({ ok: true });
    // Full: the oldest leaves the window at T0 + 1 h.
    expect(await consume(key, 3, T0 + 1_800_000)).toEqual({ ok: false, retryAfterSeconds: 1800 });
    expect(await consume(key, 3, T0 + HOUR * 1000 - 500)).toEqual({ ok: false, retryAfterSeconds: 1 });
    // The oldest has left: one more fits, and the row still holds three.
    expect(await consume(key, 3, T0 + HOUR * 1000 + 1)).toEqual({ ok: true });
    expect(await hits(key)).toEqual([T0 + 600_000, T0 + 1_200_000, T0 + HOUR * 1000 + 1]);
    // Many requests later, the row never holds more than the limit.
    for (let i = 0; i < 20; i++) await consume(key, 3, T0 + 3 * HOUR * 1000 + i * 1000);
    expect(await hits(key)).toHaveLength(3);
    // A key of its own is not affected.
    expect(await consume('test:other', 3, T0 + 1_800_000)).toEqual({ ok: true });
  });

  it('a rolled-back request is not counted', async () => {
    const key = 'test:rollback';
    await db
      .transaction(async (tx) => {
        await consumeRateLimit(tx, { key, limit: 1, windowSeconds: HOUR, now: T0 });
        throw new Error('refused for another reason');
      })
      .catch(() => {});
    expect(await consume(key, 1, T0 + 1000)).toEqual({ ok: true });
  });

  it('release gives back one request made at that time; prune drops keys with nothing left in the window', async () => {
    const key = 'test:release';
    await consume(key, 2, T0);
    await consume(key, 2, T0);
    expect((await consume(key, 2, T0)).ok).toBe(false);
    await releaseRateLimit(db, key, T0);
    expect(await hits(key)).toEqual([T0]);
    expect(await consume(key, 2, T0 + 1000)).toEqual({ ok: true });
    await releaseRateLimit(db, key, T0 + 999); // no such request: nothing changes
    expect(await hits(key)).toEqual([T0, T0 + 1000]);

    await consume('test:recent', 2, T0 + 86_400_000);
    // The data-retention job's rate_limits rule (src/jobs/retention.ts) is what prunes them.
    await pruneExpired(db, parseConfig({}), T0 + 86_400_000 + 2000);
    expect(await hits(key)).toBeUndefined();
    expect(await hits('test:recent')).toHaveLength(1);
  });
});
