import { describe, expect, it } from 'vitest';
import { CHANCE, judgeNoisy, LIMIT, type Trial } from './classify.ts';

// The two-stage judgement of noisy classifiers (classify.ts, judgeNoisy) on made-up observations:
// each trial shows six numbers and the classifier guesses the largest, so its accuracy is set
// exactly by how many trials have their largest number on the real profile.

type Six = number[];
const guessLargest = { largest: (o: Six) => o };

/** n trials whose real profile is 1; `hits` of them show it largest, the rest show profile 2 largest. */
function trials(n: number, hits: number): Trial<Six>[] {
  return Array.from({ length: n }, (_, i) => ({
    real: 1,
    observed: i < hits ? [9, 1, 1, 1, 1, 1] : [1, 9, 1, 1, 1, 1],
  }));
}

/** n trials where all six tie: exactly 1/6 each. */
const ties = (n: number): Trial<Six>[] =>
  Array.from({ length: n }, () => ({ real: 1, observed: [1, 1, 1, 1, 1, 1] }));

describe('judgeNoisy: a second stage only when the first is above the limit', () => {
  it('passes at once, without playing more, when every classifier is within the limit', async () => {
    let played = 0;
    const out = await judgeNoisy('made up', ties(600), guessLargest, async () => {
      played++;
      return [];
    });
    expect(out.largest).toBeCloseTo(CHANCE, 9);
    expect(played).toBe(0);
  });

  it('judges a lucky first stage again over both stages, and passes when the second shows nothing', async () => {
    let played = 0;
    // 0.3 over the first 100 trials; 1/6 exactly over 900 more: (30 + 150) / 1000 = 0.18.
    const out = await judgeNoisy('made up', trials(100, 30), guessLargest, async () => {
      played++;
      return ties(900);
    });
    expect(played).toBe(1);
    expect(out.largest).toBeCloseTo(0.18, 9);
    expect(out.largest).toBeLessThanOrEqual(LIMIT);
  });

  it('fails a leak that the second stage shows too', async () => {
    let played = 0;
    await expect(
      judgeNoisy('made up', trials(100, 30), guessLargest, async () => {
        played++;
        return trials(100, 25);
      }),
    ).rejects.toThrow(/made up \(100 \+ 100 trials\) \/ largest/);
    expect(played).toBe(1);
  });

  it('leaves a classifier listed as residual out of the decision to play more', async () => {
    let played = 0;
    await judgeNoisy(
      'made up',
      trials(100, 30),
      guessLargest,
      async () => {
        played++;
        return [];
      },
      { residual: { largest: 'known' } },
    );
    expect(played).toBe(0);
  });
});
