import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../src/platform/db/port.ts';
import { parseConfig } from '../../src/config.ts';
import { pruneExpired } from '../../src/jobs/retention.ts';
import { consumeRateLimit, releaseRateLimit } from '../../src/platform/rateLimit.ts';
import { createTestDatabase, isPostgres, type TestDatabase } from '../support/db.ts';
import { seeded } from '../splitKnowledge/classify.ts';

// The shared rate limiter (src/platform/rateLimit.ts, rate_limit_consume): one row per key, holding
// only the requests that can still decide (inside the window, at most `limit`), rewritten in place.

const HOUR = 3600;
/** On a minute's start: also a bucket boundary of an hour's window (below). */
const T0 = Date.UTC(2026, 0, 5, 12, 0, 0);

// One database for the file: each test uses keys of its own.
let t: TestDatabase;
let db: Db;
beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  // The version before migration 0062, beside the current one, for the random runs to compare with
  // (its consume function alone: the file's release function would replace the current one).
  const previous = readFileSync('test/foundation/fixtures/functions-0061/rate_limit_consume.sql', 'utf8');
  const from = previous.indexOf('CREATE OR REPLACE FUNCTION rate_limit_consume(');
  const to = previous.indexOf('CREATE OR REPLACE FUNCTION rate_limit_release(');
  if (from < 0 || to < from) throw new Error('the 0061 fixture of rate_limit_consume changed shape');
  await db.exec(
    previous.slice(from, to).replace('FUNCTION rate_limit_consume(', 'FUNCTION rate_limit_consume_0061('),
  );
});
afterAll(async () => {
  await t.drop();
});

const consume = (key: string, limit: number, now: number) =>
  db.transaction((tx) => consumeRateLimit(tx, { key, limit, windowSeconds: HOUR, now }));

describe('rate limits: one row per key, sliding window', () => {
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

// Above 100 requests per window a key's row keeps 61 counters, one per sixtieth of the window,
// instead of every request (migration 0057): a request costs the same at any limit and any traffic.
// The rule the tests hold it to: no window of an hour ever holds more than the limit, and a request
// is refused only when the hour before it plus one bucket (a minute) holds the limit, with a wait
// between the exact rule's and a minute more.
describe('rate limits above 100 per window: buckets of a sixtieth of the window', () => {
  const MINUTE = 60_000;
  const row = async (key: string) =>
    (
      await db.query<{ hits: Date[]; counted: number | null; size: number }>(
        `SELECT hits, (SELECT sum(c)::int FROM unnest(bucket_counts) c) AS counted, pg_column_size(r.*) AS size
           FROM rate_limits r WHERE key = $1`,
        [key],
      )
    )[0];

  /**
   * The running total (migration 0062) against the slots: what the window counts at the bucket of
   * the row's last counted request, added up slot by slot. Null when the row keeps no total.
   */
  const totals = async (key: string) =>
    (
      await db.query<{ kept: number | null; added: number }>(
        `SELECT bucket_total AS kept,
                (SELECT coalesce(sum(c), 0)::int FROM unnest(bucket_ids, bucket_counts) AS b(id, c)
                  WHERE id >= floor(extract(epoch FROM last_at) / (window_seconds / 60.0))::bigint - 60) AS added
           FROM rate_limits WHERE key = $1`,
        [key],
      )
    )[0];

  /**
   * Requests from one or two clocks (`skewMs` apart: two instances whose clocks disagree). At every
   * step: the answer is the previous version's (which added the slots up at every request) for the
   * same requests on a key of its own, the running total is the slots' sum, and, with one clock,
   * the window rule holds.
   */
  const randomRun = async (key: string, seed: number, skewMs: number) => {
    const limit = 120;
    const random = seeded(seed);
    const admitted: number[] = [];
    let clock = T0 + 17_000;
    let refusals = 0;
    let totalsChecked = 0;
    for (let i = 0; i < 1_200; i++) {
      // Bursts of requests seconds apart, and pauses of up to four minutes: about 190 an hour.
      clock += random() < 0.85 ? Math.floor(random() * 3_000) : Math.floor(random() * 4 * MINUTE);
      const now = skewMs !== 0 && random() < 0.3 ? clock - skewMs : clock;
      const inWindow = admitted.filter((a) => a > now - HOUR * 1000).length;
      const inWindowAndBucket = admitted.filter((a) => a > now - HOUR * 1000 - MINUTE).length;
      const r = await consume(key, limit, now);
      const previous = (
        await db.query<{ retry: number }>('SELECT rate_limit_consume_0061($1, $2, $3, $4) AS retry', [
          `${key}:0061`,
          limit,
          HOUR,
          new Date(now),
        ])
      )[0]?.retry;
      expect(r.ok ? 0 : r.retryAfterSeconds, `request ${i}: the previous version's answer`).toBe(previous);
      if (skewMs !== 0) {
        if (r.ok) admitted.push(now);
        else refusals++;
      } else if (r.ok) {
        expect(inWindow + 1, `request ${i}: the window would hold more than the limit`).toBeLessThanOrEqual(
          limit,
        );
        admitted.push(now);
      } else {
        refusals++;
        expect(
          inWindowAndBucket,
          `request ${i}: refused with room in the window and a minute`,
        ).toBeGreaterThanOrEqual(limit);
        // The exact rule's wait: until the oldest of the newest `limit` requests leaves the window.
        const decisive = admitted.slice(-limit)[0]!;
        const exactWait = Math.max(1, Math.ceil((decisive + HOUR * 1000 - now) / 1000));
        expect(r.retryAfterSeconds).toBeGreaterThanOrEqual(exactWait);
        expect(r.retryAfterSeconds).toBeLessThanOrEqual(exactWait + 61);
      }
      const total = await totals(key);
      if (total?.kept !== null && total?.kept !== undefined) {
        expect(total.kept, `request ${i}: the running total`).toBe(total.added);
        totalsChecked++;
      }
    }
    // The run reached the limit often and let most requests through, and kept its total throughout.
    expect(refusals).toBeGreaterThan(100);
    expect(admitted.length).toBeGreaterThan(500);
    expect(totalsChecked).toBeGreaterThan(1_100);
    // The same slots as the previous version's row.
    const slots = await db.query<{ key: string; ids: string[]; counts: number[]; last: Date }>(
      'SELECT key, bucket_ids AS ids, bucket_counts AS counts, last_at AS last FROM rate_limits WHERE key IN ($1, $2) ORDER BY key',
      [key, `${key}:0061`],
    );
    expect(slots).toHaveLength(2);
    expect({ ...slots[0], key }).toEqual({ ...slots[1], key });
    const kept = await row(key);
    expect(kept?.hits).toEqual([]);
    expect(kept?.size).toBeLessThan(1024);
  };

  it('holds to the window at every step of a seeded random run, and the row never grows', async () => {
    await randomRun('test:buckets-random', 20261202, 0);
  });

  it('holds to the window when two clocks two minutes apart count the same key', async () => {
    await randomRun('test:buckets-skewed', 20261204, 2 * MINUTE);
  });

  it('answers the wait until the oldest buckets stop counting, and counts again on time', async () => {
    const key = 'test:buckets-wait';
    for (let i = 0; i < 150; i++) expect((await consume(key, 200, T0 + 5_000)).ok).toBe(true);
    for (let i = 0; i < 50; i++) expect((await consume(key, 200, T0 + 20 * MINUTE)).ok).toBe(true);
    // Full. The exact rule would wait until T0 + 1 h + 5 s; the first minute's bucket counts until
    // T0 + 61 min.
    expect(await consume(key, 200, T0 + 30 * MINUTE)).toEqual({ ok: false, retryAfterSeconds: 31 * 60 });
    expect(await consume(key, 200, T0 + 61 * MINUTE - 1)).toEqual({ ok: false, retryAfterSeconds: 1 });
    expect(await consume(key, 200, T0 + 61 * MINUTE)).toEqual({ ok: true });
    // The first minute's slot now holds the new minute: its 150 requests are gone.
    expect((await row(key))?.counted).toBe(51);
  });

  it('a key keeps its counted requests when its limit crosses 100, either way', async () => {
    const key = 'test:buckets-switch';
    for (let i = 0; i < 50; i++) expect((await consume(key, 50, T0 + i * 1000)).ok).toBe(true);
    expect((await consume(key, 50, T0 + 60_000)).ok).toBe(false);
    // Raised to 200: 150 more, not 200 more.
    for (let i = 0; i < 150; i++) expect((await consume(key, 200, T0 + 2 * MINUTE)).ok).toBe(true);
    expect((await consume(key, 200, T0 + 2 * MINUTE)).ok).toBe(false);
    expect((await row(key))?.counted).toBe(200);
    // Lowered to 50: the buckets' requests are hits again, and the key is full.
    const lowered = await consume(key, 50, T0 + 3 * MINUTE);
    expect(lowered.ok).toBe(false);
    expect(lowered.ok === false && lowered.retryAfterSeconds).toBeGreaterThan(HOUR - 3 * 60);
    expect((await row(key))?.hits).toHaveLength(50);
    // An hour and a bucket later every request has left the window.
    expect(await consume(key, 50, T0 + 3 * MINUTE + HOUR * 1000 + MINUTE)).toEqual({ ok: true });
  });

  it('release gives back one request of its bucket; prune drops a bucket row a day after its last request', async () => {
    const key = 'test:buckets-release';
    for (let i = 0; i < 101; i++) expect((await consume(key, 101, T0)).ok).toBe(true);
    expect((await consume(key, 101, T0 + 1000)).ok).toBe(false);
    await releaseRateLimit(db, key, T0 + 2 * MINUTE); // no request in that bucket: nothing changes
    expect((await consume(key, 101, T0 + 1000)).ok).toBe(false);
    await releaseRateLimit(db, key, T0 + 30_000);
    // The slot changed outside the count: the row forgets its total, and the next request adds the
    // slots up again.
    expect((await totals(key))?.kept).toBeNull();
    expect(await consume(key, 101, T0 + 1000)).toEqual({ ok: true });
    expect((await row(key))?.counted).toBe(101);
    expect(await totals(key)).toEqual({ kept: 101, added: 101 });

    await consume('test:buckets-recent', 101, T0 + 86_400_000);
    await pruneExpired(db, parseConfig({}), T0 + 86_400_000 + 2000);
    expect(await row(key)).toBeUndefined();
    expect((await row('test:buckets-recent'))?.counted).toBe(1);
  });

  // Real parallelism needs PostgreSQL (PGlite runs one transaction at a time).
  it.runIf(isPostgres)('many requests at once: exactly the limit gets through', async () => {
    const key = 'test:buckets-parallel';
    const results = await Promise.all(Array.from({ length: 160 }, () => consume(key, 120, T0)));
    expect(results.filter((r) => r.ok)).toHaveLength(120);
    expect((await row(key))?.counted).toBe(120);
  });
});
