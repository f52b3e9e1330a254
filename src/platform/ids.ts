import { randomBytes } from 'node:crypto';

// Prefixed identifiers (bot_, chk_, evt_, card_, task_…). The random part is lowercase base32 so an
// id is also a valid DNS label (tunnel hostnames are bot-<id>.<domain>).
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';

// Random bytes are drawn from the system's CSPRNG 4 KiB at a time and handed out once each (as
// Node's randomUUID does): a checkout makes three ids, and a randomBytes call per id (a crypto job
// and a buffer each) was about 3 % of the service's CPU per checkout (perf, npm run bench:checkout).
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let used = 0;

function poolBytes(length: number): Buffer {
  if (used + length > pool.length) {
    pool = randomBytes(Math.max(POOL_BYTES, length));
    used = 0;
  }
  const out = pool.subarray(used, used + length);
  used += length;
  return out;
}

export function randomBase32(length: number): string {
  const bytes = poolBytes(length);
  let out = '';
  for (let i = 0; i < length; i++) out += ALPHABET[(bytes[i] ?? 0) & 31];
  return out;
}

export function newId(prefix: string): string {
  return `${prefix}_${randomBase32(16)}`;
}

// Time-ordered ids, for the rows written most (events, and the webhook deliveries and attempts
// that share an event's id suffix): TIME_CHARS characters of the creation time in milliseconds,
// then the same 16 random characters as newId (80 bits: as hard to guess as any other id). The
// time is written in the same 32 characters reordered so that character order is value order
// (digits sort before letters in ASCII and in every collation), so ids sort by creation time and
// a new row's id goes to the right-hand end of each index on it, not to a random page of an
// index that after a year holds tens of millions of entries (docs/deploy.md, "Data retention").
const SORTED = '234567abcdefghijklmnopqrstuvwxyz';
export const TIME_CHARS = 10; // 50 bits of milliseconds: until the year 37,648

/** The time part of a time-ordered id: `ms` (clamped to 0…2^50 − 1) in TIME_CHARS sortable characters. */
export function sortableTime(ms: number): string {
  let n = Math.min(Math.max(Math.floor(ms), 0), 2 ** (5 * TIME_CHARS) - 1);
  let out = '';
  for (let i = 0; i < TIME_CHARS; i++) {
    out = SORTED.charAt(n % 32) + out;
    n = Math.floor(n / 32);
  }
  return out;
}

/** `<prefix>_` + time part of `at` + 16 random characters; sorts by `at` (milliseconds). */
export function newTimeOrderedId(prefix: string, at: number): string {
  return `${prefix}_${sortableTime(at)}${randomBase32(16)}`;
}

/** The part after the prefix: `bot_abc` → `abc`. */
export function idSuffix(id: string): string {
  return id.slice(id.indexOf('_') + 1);
}
