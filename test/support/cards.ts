import {
  type ActivationRequest,
  buildSplit,
  type CardStart,
  luhnPart,
  type ProfilesFile,
} from '../../src/cards/split.ts';

// Cards for tests: a real-looking card number whose missing digits are DIGITS, split the way the
// card wizard and `botpay card split` split it (src/cards/split.ts).

/** The real card's digits at the missing positions in every test card. */
export const DIGITS = '739';
export const EXPIRY = { expiry_month: '09', expiry_year: '2030' } as const;

/** A Luhn-valid number of the given length with `digits` at `position` (test numbers, never real). */
export function realCardNumber(position: number, digits = DIGITS, prefix = '45320151', length = 16): string {
  let body = prefix;
  while (body.length < length - 1) body += body.length === position ? digits : String((body.length * 7) % 10);
  body = body.slice(0, position) + digits + body.slice(position + 3, length - 1);
  return body + String((10 - luhnPart(body, 0, length)) % 10);
}

export const HOLDER = {
  cardholder_name: 'Ada Lovelace',
  billing_address: { line1: '12 St James Square', city: 'London', postal_code: 'SW1Y 4JH', country: 'GB' },
};

/** The profiles file and the activation body for a started card. */
export function splitCard(
  start: CardStart,
  options: { number?: string; expiry?: { expiry_month: string; expiry_year: string }; now?: Date } = {},
): { file: ProfilesFile; activation: ActivationRequest; number: string } {
  const number = options.number ?? realCardNumber(start.missing_digit_positions[0]!);
  const { file, activation } = buildSplit(
    { number, ...(options.expiry ?? EXPIRY), ...HOLDER },
    start,
    options.now ?? new Date('2026-01-01T00:00:00Z'),
  );
  return { file, activation, number };
}
