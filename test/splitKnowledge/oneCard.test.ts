import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ProfilesFile } from '../../src/cards/split.ts';
import { checkout, purchase, setupCard } from '../checkout/helpers.ts';
import { realCardNumber, splitCard } from '../support/cards.ts';
import { activeBot, createTestService, type TestService } from '../support/service.ts';
import { accuracy, CHANCE, combine, judge, per, type Trial } from './classify.ts';
import { ownerWithWideBudgets } from './world.ts';

// Channel: two files of one card. The same card number on two bots (or added again after a loss)
// used to give two files whose real profile was the same number and whose decoys differed, so the
// one profile the two files shared was the real one; and two files that hid different digits held
// the whole number between them. Now a card added again names the first (same_card_as): both bots
// hold one and the same file (the dashboard writes the second bot's copy from the first), and the
// service returns the same digits for each profile on both. The attacker holds both files and both
// bots' keys.
//
// Deterministic: every profile appears in both files alike, so the classifiers tie (exactly 1/6);
// a control plays the old way (a second, independent split of the same number) and is caught.

const OWNERS = Number(process.env.SPLIT_KNOWLEDGE_CARD_OWNERS ?? 30);

interface Observed {
  a: ProfilesFile;
  b: ProfilesFile;
  /** Digits an approved purchase returned on each profile, on bot A and on bot B. */
  digitsA: string[];
  digitsB: string[];
}

let svc: TestService;
const trials: Trial<Observed>[] = [];
const control: Trial<Observed>[] = [];

/** The dashboard's copy of a file for the second bot: the same profiles, its own ids (cardWizard.ts relabel). */
const relabel = (file: ProfilesFile, cardId: string, botId: string): ProfilesFile => ({
  ...file,
  card_id: cardId,
  bot_id: botId,
});

beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
  const auto = { approval_mode: 'auto_approve_under_threshold', approval_threshold_cents: 1000 };
  for (let i = 0; i < OWNERS; i++) {
    const owner = await ownerWithWideBudgets(svc);
    const a = await activeBot(svc, owner, { fundCents: 5000 });
    const b = await activeBot(svc, owner, { fundCents: 5000 });
    const first = await setupCard(svc, owner, a.bot_id, auto);
    const res = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${b.bot_id}/cards`,
      headers: owner.auth,
      payload: { same_card_as: first.card_id },
    });
    expect(res.statusCode, res.body).toBe(201);
    const second = res.json();
    await svc.app.inject({
      method: 'PATCH',
      url: `/api/v1/owner/bots/${b.bot_id}/cards/${second.card_id}`,
      headers: owner.auth,
      payload: auto,
    });
    const digitsA: string[] = [];
    const digitsB: string[] = [];
    for (let profile = 1; profile <= 6; profile++) {
      digitsA.push((await checkout(svc, a, purchase(profile, 100))).json().missing_digits);
      digitsB.push((await checkout(svc, b, purchase(profile, 100))).json().missing_digits);
    }
    const fileB = relabel(first.file, second.card_id, b.bot_id);
    trials.push({ real: first.real_profile_index, observed: { a: first.file, b: fileB, digitsA, digitsB } });
    // The old way: the second bot's card split again from the same number, with its own draw of
    // real profile and positions.
    const number = realCardNumber(first.missing_digit_positions[0] ?? 8);
    const redo = splitCard(
      {
        card_id: 'card_control',
        bot_id: b.bot_id,
        real_profile_index: 1 + (i % 6),
        missing_digit_positions: i % 2 ? [8, 9, 10] : [9, 10, 11],
      },
      { number },
    );
    control.push({
      real: first.real_profile_index,
      observed: { a: first.file, b: redo.file, digitsA, digitsB: digitsA },
    });
  }
}, 900_000);

afterAll(async () => {
  await svc?.close();
});

const numbers = (f: ProfilesFile) => f.profiles.map((p) => p.card_number);
/** Whether two masked numbers agree on every digit both show. */
const agree = (x: string, y: string) => [...x].every((c, k) => c === '*' || y[k] === '*' || c === y[k]);

const classifiers = {
  'the number found in both files': (o: Observed) =>
    per((i) => (numbers(o.b).some((n) => agree(n, numbers(o.a)[i - 1] ?? '')) ? 1 : 0)),
  'the profile at the same index in both files': (o: Observed) =>
    per((i) => (numbers(o.a)[i - 1] === numbers(o.b)[i - 1] ? 1 : 0)),
  'digits that differ between the bots': (o: Observed) =>
    per((i) => (o.digitsA[i - 1] === o.digitsB[i - 1] ? 0 : 1)),
};

describe('split knowledge: two files of one card', () => {
  it('a card added to a second bot shares its file and digits: no profile stands out', () => {
    const out = judge('two files of one card', trials, {
      ...classifiers,
      'all combined': combine(Object.values(classifiers)),
    });
    for (const [name, a] of Object.entries(out)) expect(a, name).toBeCloseTo(CHANCE, 9);
    // Together the two files never hold more of the real number than one does.
    for (const t of trials) {
      expect(t.observed.a.missing_digit_positions).toEqual(t.observed.b.missing_digit_positions);
      expect(numbers(t.observed.b)).toEqual(numbers(t.observed.a));
    }
  });

  it('control: two independent splits of one number show the real profile, and often the whole number', () => {
    const caught = accuracy(control, classifiers['the number found in both files']);
    const whole = control.filter(
      (t) => t.observed.a.missing_digit_positions[0] !== t.observed.b.missing_digit_positions[0],
    ).length;
    console.log(
      `[split-knowledge] control: independent splits, real profile found ${caught.toFixed(3)}; whole number in ${whole} of ${control.length}`,
    );
    expect(caught).toBeGreaterThan(0.9);
    expect(whole).toBeGreaterThan(0);
  });
});
