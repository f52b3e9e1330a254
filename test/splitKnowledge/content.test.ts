import { describe, expect, it } from 'vitest';
import { decoyProfile } from '../../src/cards/decoys.ts';
import { decoyExpiryMonth } from '../../src/cards/service.ts';
import {
  buildSplit,
  type CardStart,
  isLuhnValid,
  luhnPart,
  networkOf,
  type ProfilesFile,
} from '../../src/cards/split.ts';
import { accuracy, combine, judge, per, seeded, type Trial } from './classify.ts';
import { createSecretBox } from '../../src/platform/crypto.ts';

// Channel: the profiles file, and the digits and expiry an approved checkout returns per profile.
// 3,000 simulated cards from four networks, split by the same code as the card wizard and
// `botpay card split`, with decoy expiries drawn by the service's own function. No database:
// this channel is decided where the file is built.

const CARDS = 3000;
const NOW = new Date('2026-11-22T12:00:00Z');
// Public issuer prefixes of each network (the attacker knows these too).
const ISSUERS = [
  { prefix: '453201', length: 16 },
  { prefix: '414720', length: 16 },
  { prefix: '549618', length: 16 },
  { prefix: '222300', length: 16 },
  { prefix: '371449', length: 15 },
  { prefix: '601100', length: 16 },
];
const PUBLIC_TEST_PREFIXES = ['424242', '400000', '401288', '555555', '510510', '222300', '520082', '411111'];

interface Observed {
  file: ProfilesFile;
  /** What an approved checkout on each profile returned. */
  returned: Array<{ missing_digits: string; expiry_month: string; expiry_year: string }>;
}

function realCard(rand: () => number) {
  const issuer = ISSUERS[Math.floor(rand() * ISSUERS.length)]!;
  let body = issuer.prefix;
  while (body.length < issuer.length - 1) body += String(Math.floor(rand() * 10));
  const number = body + String((10 - luhnPart(body, 0, issuer.length)) % 10);
  const year = NOW.getUTCFullYear() + Math.floor(rand() * 6);
  const first = year === NOW.getUTCFullYear() ? NOW.getUTCMonth() + 1 : 1;
  const month = first + Math.floor(rand() * (13 - first));
  return { number, expiry_month: String(month).padStart(2, '0'), expiry_year: String(year) };
}

function world(): Trial<Observed>[] {
  const rand = seeded(12);
  const trials: Trial<Observed>[] = [];
  for (let i = 0; i < CARDS; i++) {
    const real = 1 + Math.floor(rand() * 6);
    const start: CardStart = {
      card_id: `card_${i}`,
      bot_id: `bot_${i}`,
      real_profile_index: real,
      missing_digit_positions: [8 + Math.floor(rand() * 2)].flatMap((p) => [p, p + 1, p + 2]),
    };
    const card = realCard(rand);
    const { file, activation } = buildSplit(
      {
        ...card,
        cardholder_name: 'Grace Hopper',
        billing_address: { line1: '1 Navy Yard', city: 'Arlington', postal_code: '22202', country: 'US' },
      },
      start,
      NOW,
    );
    // What the service stores and returns (src/cards/service.ts activateCard).
    const returned = activation.profiles.map((p) => ({
      missing_digits: p.missing_digits,
      expiry_year: activation.expiry_year,
      expiry_month:
        p.profile_index === real
          ? activation.expiry_month
          : decoyExpiryMonth(Number(activation.expiry_year), NOW),
    }));
    trials.push({ real, observed: { file, returned } });
  }
  return trials;
}

const number = (o: Observed, i: number) =>
  o.file.profiles[i - 1]!.card_number.replace('***', o.returned[i - 1]!.missing_digits);
const visible = (o: Observed, i: number) => o.file.profiles[i - 1]!.card_number.replace('***', '');
/** How many other profiles differ from this one in f (the odd one out scores highest). */
const odd = (_o: Observed, f: (i: number) => unknown) =>
  per((i) => [1, 2, 3, 4, 5, 6].filter((j) => String(f(j)) !== String(f(i))).length);

describe('split knowledge: file content, Luhn and BIN, expiry', () => {
  it('no profile stands out by what the file and the checkout answers contain', () => {
    const trials = world();
    const classifiers = {
      'Luhn-valid once completed': (o: Observed) => per((i) => (isLuhnValid(number(o, i)) ? 1 : 0)),
      'network and length differ from the others': (o: Observed) =>
        odd(o, (i) => `${networkOf(number(o, i))?.name}/${number(o, i).length}`),
      'issuer prefix (8 digits) differs': (o: Observed) => odd(o, (i) => number(o, i).slice(0, 8)),
      'not a public test prefix': (o: Observed) =>
        per((i) => (PUBLIC_TEST_PREFIXES.some((p) => number(o, i).startsWith(p)) ? 0 : 1)),
      'holder or address differs': (o: Observed) =>
        odd(o, (i) =>
          JSON.stringify([o.file.profiles[i - 1]!.cardholder_name, o.file.profiles[i - 1]!.billing_address]),
        ),
      'fewest distinct visible digits': (o: Observed) => per((i) => -new Set(visible(o, i)).size),
      'most repeated adjacent digits': (o: Observed) =>
        per((i) => [...visible(o, i)].filter((d, k, a) => k > 0 && a[k - 1] === d).length),
      'lowest missing digits': (o: Observed) => per((i) => -Number(o.returned[i - 1]!.missing_digits)),
      'expiry year differs': (o: Observed) => odd(o, (i) => o.returned[i - 1]!.expiry_year),
      'latest expiry month': (o: Observed) => per((i) => Number(o.returned[i - 1]!.expiry_month)),
      'earliest expiry month': (o: Observed) => per((i) => -Number(o.returned[i - 1]!.expiry_month)),
      'most typical expiry month (median)': (o: Observed) => {
        const months = per((i) => Number(o.returned[i - 1]!.expiry_month));
        const sorted = [...months].sort((a, b) => a - b);
        const mid = (sorted[2]! + sorted[3]!) / 2;
        return months.map((m) => -Math.abs(m - mid));
      },
    };
    judge('content', trials, { ...classifiers, 'all combined': combine(Object.values(classifiers)) });
  });

  it('control: the same classifiers catch the legacy generator (test prefixes, made-up holders, later years)', () => {
    const secrets = createSecretBox('control-secret-key-0123456789abcdef0123456789');
    const trials = world()
      .slice(0, 300)
      .map(({ real, observed }) => {
        const profiles = observed.file.profiles.map((p) => {
          if (p.profile_index === real) return p;
          const d = decoyProfile(secrets, observed.file.card_id, p.profile_index, NOW.getUTCFullYear());
          return {
            ...p,
            card_number: d.cardNumber,
            cardholder_name: d.cardholderName,
            billing_address: d.billingAddress as never,
          };
        });
        return { real, observed: { ...observed, file: { ...observed.file, profiles } } };
      });
    const legacy = (o: Observed) =>
      per((i) =>
        PUBLIC_TEST_PREFIXES.some((p) => o.file.profiles[i - 1]!.card_number.startsWith(p)) ? 0 : 1,
      );
    const a = accuracy(trials, legacy);
    console.log(`[split-knowledge] control: legacy decoys, test-prefix classifier ${a.toFixed(3)}`);
    expect(a).toBeGreaterThan(0.5);
  });
});
