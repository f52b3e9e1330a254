import type { SecretBox } from '../platform/crypto.ts';
import { present } from '../platform/present.ts';

// Decoy payment profiles. Everything about a decoy (number, name, address, expiry) is derived
// deterministically from SECRET_KEY, the card id and the profile index, so it is stable for the
// life of the card without being stored, and unpredictable to anyone without SECRET_KEY.
//
// Numbers are 16 digits, Luhn-valid, from well-known test ranges (never a real account), so that
// after the missing digits are filled in a decoy looks exactly like a completed real number.

const TEST_PREFIXES = ['424242', '400000', '401288', '555555', '510510', '222300', '520082', '411111'];
const FIRST_NAMES = [
  'Alex',
  'Jordan',
  'Taylor',
  'Morgan',
  'Casey',
  'Riley',
  'Jamie',
  'Avery',
  'Quinn',
  'Drew',
  'Maria',
  'Daniel',
  'Laura',
  'Peter',
  'Sofia',
  'Martin',
  'Elena',
  'Thomas',
  'Nina',
  'Lucas',
];
const LAST_NAMES = [
  'Miller',
  'Garcia',
  'Novak',
  'Schmidt',
  'Fischer',
  'Rossi',
  'Dubois',
  'Jensen',
  'Kowalski',
  'Larsen',
  'Bennett',
  'Hughes',
  'Walsh',
  'Moreau',
  'Keller',
  'Berg',
  'Costa',
  'Lindqvist',
  'Horvat',
  'Brooks',
];
const STREETS = [
  'Maple Avenue',
  'Oak Street',
  'Cedar Lane',
  'Pine Road',
  'Elm Street',
  'Willow Way',
  'Lakeview Drive',
  'Hillcrest Road',
  'River Street',
  'Park Avenue',
  'Sunset Boulevard',
  'Church Street',
  'Mill Lane',
];
const CITIES: Array<[string, string, string]> = [
  ['Portland', 'OR', '97205'],
  ['Austin', 'TX', '78701'],
  ['Denver', 'CO', '80202'],
  ['Madison', 'WI', '53703'],
  ['Raleigh', 'NC', '27601'],
  ['Boise', 'ID', '83702'],
  ['Columbus', 'OH', '43215'],
  ['Tucson', 'AZ', '85701'],
  ['Albany', 'NY', '12207'],
  ['Richmond', 'VA', '23219'],
  ['Omaha', 'NE', '68102'],
  ['Spokane', 'WA', '99201'],
];

/** A deterministic stream of pseudo-random integers keyed by SECRET_KEY and a label. */
function stream(secrets: SecretBox, label: string) {
  let counter = 0;
  let pool: Buffer = Buffer.alloc(0);
  return (max: number): number => {
    if (pool.length < 4) {
      pool = Buffer.concat([pool, Buffer.from(secrets.sign(`${label}:${counter++}`), 'base64url')]);
    }
    const value = pool.readUInt32BE(0);
    pool = pool.subarray(4);
    return value % max;
  };
}

export function luhnCheckDigit(partial: string): number {
  let sum = 0;
  // Walking from the right of the partial number, the first digit is doubled.
  for (let i = 0; i < partial.length; i++) {
    let d = Number(partial[partial.length - 1 - i]);
    if (i % 2 === 0) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return (10 - (sum % 10)) % 10;
}

export function isLuhnValid(number: string): boolean {
  return /^\d+$/.test(number) && luhnCheckDigit(number.slice(0, -1)) === Number(number.slice(-1));
}

export interface DecoyProfile {
  cardNumber: string;
  cardholderName: string;
  billingAddress: { line1: string; city: string; state: string; postal_code: string; country: string };
  expiryMonth: string;
  expiryYear: string;
}

export function decoyProfile(
  secrets: SecretBox,
  cardId: string,
  profileIndex: number,
  activatedYear: number,
): DecoyProfile {
  const next = stream(secrets, `decoy:${cardId}:${profileIndex}`);
  let body = present(TEST_PREFIXES[next(TEST_PREFIXES.length)], 'a test prefix');
  while (body.length < 15) body += String(next(10));
  const cardNumber = body + String(luhnCheckDigit(body));
  const [city, state, postal] = present(CITIES[next(CITIES.length)], 'a city');
  return {
    cardNumber,
    cardholderName: `${FIRST_NAMES[next(FIRST_NAMES.length)]} ${LAST_NAMES[next(LAST_NAMES.length)]}`,
    billingAddress: {
      line1: `${100 + next(9800)} ${STREETS[next(STREETS.length)]}`,
      city,
      state,
      postal_code: postal,
      country: 'US',
    },
    expiryMonth: String(1 + next(12)).padStart(2, '0'),
    // Cards are usually issued for 3 to 5 years.
    expiryYear: String(activatedYear + 2 + next(4)),
  };
}

/** The 3 digits of a decoy number at the card's missing positions (what a decoy checkout returns). */
export function decoyMissingDigits(decoy: DecoyProfile, missingPosition: number): string {
  return decoy.cardNumber.slice(missingPosition, missingPosition + 3);
}

/** The number as printed in the profiles file: the 3 missing positions shown as `*`. */
export function maskMissing(number: string, missingPosition: number): string {
  return `${number.slice(0, missingPosition)}***${number.slice(missingPosition + 3)}`;
}
