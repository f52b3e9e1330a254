// Building a card's split knowledge where the full number is typed: in the owner's browser (the
// dashboard's card wizard bundles this file) and in `botpay card split`. Nothing here imports Node
// or talks to the network: it turns the owner's card into the payment profiles file for the bot
// and the activation request for the service, which carries only 3 digits per profile.
//
// All six profiles share what the real card shares with its siblings: network, issuer prefix
// (the first KEPT_PREFIX digits), length, cardholder name and billing address. The decoys' other
// digits are random, and their last digit makes them Luhn-valid once their own 3 missing digits
// are filled in, so no profile can be told from the real one by content (docs/security.md).

export const PROFILE_COUNT = 6;
/** Digits every profile shares with the real card: the issuer prefix (8-digit BINs included). */
export const KEPT_PREFIX = 8;
/** First missing position (0-based) is drawn from this range; the 3 digits never touch the prefix. */
export const FIRST_MISSING_POSITION = 8;
export const LAST_MISSING_POSITION = 9;
/** Digits of the issuer prefix the service receives to check network and length. */
export const BIN_DIGITS = 6;

export const PROFILES_FORMAT = 'botpay-payment-profiles/2';

export interface Network {
  name: string;
  /** Whether a number starting with these digits belongs to the network. */
  matches: (digits: string) => boolean;
  lengths: number[];
}

const between = (digits: string, size: number, low: number, high: number) => {
  const n = Number(digits.slice(0, size));
  return digits.length >= size && n >= low && n <= high;
};

/** Card networks by issuer prefix (IIN ranges) and the lengths their numbers have. */
export const NETWORKS: Network[] = [
  { name: 'American Express', matches: (d) => /^3[47]/.test(d), lengths: [15] },
  { name: 'Diners Club', matches: (d) => /^3(0[0-5]|[689])/.test(d), lengths: [14, 15, 16, 17, 18, 19] },
  { name: 'JCB', matches: (d) => between(d, 4, 3528, 3589), lengths: [16, 17, 18, 19] },
  {
    name: 'Discover',
    matches: (d) => /^(6011|65|64[4-9])/.test(d) || between(d, 6, 622126, 622925),
    lengths: [16, 17, 18, 19],
  },
  { name: 'UnionPay', matches: (d) => /^62/.test(d), lengths: [16, 17, 18, 19] },
  { name: 'Mastercard', matches: (d) => /^5[1-5]/.test(d) || between(d, 4, 2221, 2720), lengths: [16] },
  { name: 'Maestro', matches: (d) => /^(5[06-9]|6[0-9])/.test(d), lengths: [12, 13, 14, 15, 16, 17, 18, 19] },
  { name: 'Visa', matches: (d) => /^4/.test(d), lengths: [13, 16, 19] },
];

export function networkOf(digits: string): Network | null {
  return NETWORKS.find((n) => n.matches(digits)) ?? null;
}

/** Luhn weight of the digit at 0-based position i of a number of the given length (1 or 2). */
function doubled(i: number, length: number): boolean {
  return (length - 1 - i) % 2 === 1;
}

function luhnDigit(d: number, twice: boolean): number {
  if (!twice) return d;
  const x = d * 2;
  return x > 9 ? x - 9 : x;
}

/** Luhn sum (mod 10) of the digits at positions from..from+digits.length-1 of a number of that length. */
export function luhnPart(digits: string, from: number, length: number): number {
  let sum = 0;
  for (let k = 0; k < digits.length; k++) sum += luhnDigit(Number(digits[k]), doubled(from + k, length));
  return sum % 10;
}

export function isLuhnValid(number: string): boolean {
  return /^\d{2,19}$/.test(number) && luhnPart(number, 0, number.length) === 0;
}

/** Whether 3 digits at position p complete a number whose other digits sum (Luhn, mod 10) to visible. */
export function completesLuhn(missing: string, position: number, length: number, visible: number): boolean {
  return (visible + luhnPart(missing, position, length)) % 10 === 0;
}

export interface BillingAddress {
  line1: string;
  line2?: string;
  city: string;
  state?: string;
  postal_code: string;
  country: string;
}

export interface CardholderInput {
  number: string;
  expiry_month: string;
  expiry_year: string;
  cardholder_name: string;
  billing_address: BillingAddress;
}

export interface CardStart {
  card_id: string;
  bot_id: string;
  real_profile_index: number;
  missing_digit_positions: number[];
}

export interface ActivationProfile {
  profile_index: number;
  missing_digits: string;
  /** Luhn sum (mod 10) of the profile's other digits: lets the service check the digits complete it. */
  visible_luhn: number;
}

/** The body of POST /api/v1/owner/bots/{bot_id}/cards/{card_id}/activate. */
export interface ActivationRequest {
  bin: string;
  card_length: number;
  expiry_month: string;
  expiry_year: string;
  profiles: ActivationProfile[];
  /** Confirms a card that resembles one already added is not the same card (409 possible_same_card). */
  different_card?: boolean;
}

export interface ProfilesFile {
  format: typeof PROFILES_FORMAT;
  card_id: string;
  bot_id: string;
  /** 0-based indexes into card_number (the API's convention); `missing_digits_are` says it in words. */
  missing_digit_positions: number[];
  /** For people: which digits are missing, counted from 1 as the dashboard shows them. */
  missing_digits_are: string;
  instructions: string;
  profiles: Array<{
    profile_index: number;
    card_number: string;
    cardholder_name: string;
    billing_address: BillingAddress;
  }>;
}

/**
 * The missing digits as a person counts them (the first digit of the card is digit 1), from the
 * 0-based positions the API uses: [8, 9, 10] → "9, 10 and 11". The dashboard, the CLI and the
 * profiles file all say it this way.
 */
export function humanDigitPositions(positions: readonly number[]): string {
  const human = positions.map((p) => String(p + 1));
  return human.length > 1 ? `${human.slice(0, -1).join(', ')} and ${human.at(-1)}` : (human[0] ?? '');
}

/** The file's sentence that says which digits are missing, in both conventions. */
export function missingDigitsSentence(positions: readonly number[]): string {
  return `Digits ${humanDigitPositions(positions)} of the card number, counting the first digit as 1: the *** in each card_number. (missing_digit_positions lists the same digits counting from 0.)`;
}

/** Digits only: spaces and dashes as people type them are dropped. */
export function normalizeNumber(raw: string): string {
  return raw.replace(/[\s-]/g, '');
}

/**
 * What is wrong with the owner's input, in words for the owner (null when nothing is). `now` is
 * for the expiry check.
 */
export function checkCardholderInput(input: CardholderInput, start: CardStart, now: Date): string | null {
  const number = normalizeNumber(input.number);
  if (!/^\d+$/.test(number)) return 'The card number must contain only digits.';
  const network = networkOf(number);
  if (!network) return 'This card number does not start like a card of a known network.';
  if (!network.lengths.includes(number.length)) {
    return `A ${network.name} card number has ${network.lengths.join(' or ')} digits; this one has ${number.length}.`;
  }
  if (!isLuhnValid(number)) return 'The card number is mistyped: its check digit does not match.';
  const position = start.missing_digit_positions[0];
  if (position === undefined) return 'The card has no missing digit positions.';
  if (position + 3 > number.length - 1) return 'This card number is too short for the chosen positions.';
  const month = Number(input.expiry_month);
  const year = Number(input.expiry_year);
  if (!Number.isInteger(month) || month < 1 || month > 12) return 'The expiry month must be 1 to 12.';
  if (!Number.isInteger(year) || year < 2000 || year > 2099)
    return 'The expiry year must be four digits (20YY).';
  if (year < now.getUTCFullYear() || (year === now.getUTCFullYear() && month < now.getUTCMonth() + 1)) {
    return 'The card has expired.';
  }
  if (!input.cardholder_name.trim()) return 'The cardholder name is required.';
  const a = input.billing_address;
  if (!a.line1.trim() || !a.city.trim() || !a.postal_code.trim() || !/^[A-Za-z]{2}$/.test(a.country.trim())) {
    return 'The billing address needs a street, a city, a postal code and a 2-letter country code.';
  }
  return null;
}

/** Random integers in [0, max) from the platform's CSPRNG (browser and Node both have crypto). */
export type RandomInt = (max: number) => number;

export function cryptoRandomInt(max: number): number {
  const limit = Math.floor(0x1_0000_0000 / max) * max;
  const buf = new Uint32Array(1);
  for (;;) {
    globalThis.crypto.getRandomValues(buf);
    const value = buf[0] ?? limit;
    if (value < limit) return value % max;
  }
}

/** A decoy number: the real card's prefix and length, random digits, Luhn-valid. */
export function decoyNumber(real: string, random: RandomInt): string {
  let body = real.slice(0, KEPT_PREFIX);
  while (body.length < real.length - 1) body += String(random(10));
  // The check digit that makes the whole number Luhn-valid.
  const partial = luhnPart(body, 0, real.length);
  return body + String((10 - partial) % 10);
}

function mask(number: string, position: number): string {
  return `${number.slice(0, position)}***${number.slice(position + 3)}`;
}

/**
 * The profiles file for the bot and the activation request for the service. Throws with the
 * owner-facing message of checkCardholderInput when the input is not a usable card.
 */
export function buildSplit(
  input: CardholderInput,
  start: CardStart,
  now: Date,
  random: RandomInt = cryptoRandomInt,
): { file: ProfilesFile; activation: ActivationRequest } {
  const problem = checkCardholderInput(input, start, now);
  if (problem) throw new Error(problem);
  const real = normalizeNumber(input.number);
  const position = start.missing_digit_positions[0];
  if (position === undefined) throw new Error('The card has no missing digit positions.');
  const address: BillingAddress = {
    line1: input.billing_address.line1.trim(),
    ...(input.billing_address.line2?.trim() ? { line2: input.billing_address.line2.trim() } : {}),
    city: input.billing_address.city.trim(),
    ...(input.billing_address.state?.trim() ? { state: input.billing_address.state.trim() } : {}),
    postal_code: input.billing_address.postal_code.trim(),
    country: input.billing_address.country.trim().toUpperCase(),
  };
  const name = input.cardholder_name.trim().replace(/\s+/g, ' ');
  const profiles: ProfilesFile['profiles'] = [];
  const activation: ActivationProfile[] = [];
  for (let index = 1; index <= PROFILE_COUNT; index++) {
    const number = index === start.real_profile_index ? real : decoyNumber(real, random);
    const missing = number.slice(position, position + 3);
    const visible = `${number.slice(0, position)}000${number.slice(position + 3)}`;
    profiles.push({
      profile_index: index,
      card_number: mask(number, position),
      cardholder_name: name,
      billing_address: address,
    });
    activation.push({
      profile_index: index,
      missing_digits: missing,
      visible_luhn: luhnPart(visible, 0, number.length),
    });
  }
  return {
    file: {
      format: PROFILES_FORMAT,
      card_id: start.card_id,
      bot_id: start.bot_id,
      missing_digit_positions: [position, position + 1, position + 2],
      missing_digits_are: missingDigitsSentence([position, position + 1, position + 2]),
      instructions:
        'Give this file to your bot and keep it nowhere else. Bot: pass profile_index at checkout; an approved checkout returns missing_digits (the *** positions of that profile) and the expiry.',
      profiles,
    },
    activation: {
      bin: real.slice(0, BIN_DIGITS),
      card_length: real.length,
      expiry_month: String(Number(input.expiry_month)).padStart(2, '0'),
      expiry_year: String(Number(input.expiry_year)),
      profiles: activation,
    },
  };
}
