import { randomBytes } from 'node:crypto';

// Prefixed identifiers (bot_, chk_, evt_, card_, task_…). The random part is lowercase base32 so an
// id is also a valid DNS label (tunnel hostnames are bot-<id>.<domain>).
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';

export function randomBase32(length: number): string {
  const bytes = randomBytes(length);
  let out = '';
  for (let i = 0; i < length; i++) out += ALPHABET[(bytes[i] ?? 0) & 31];
  return out;
}

export function newId(prefix: string): string {
  return `${prefix}_${randomBase32(16)}`;
}

/** The part after the prefix: `bot_abc` → `abc`. */
export function idSuffix(id: string): string {
  return id.slice(id.indexOf('_') + 1);
}
