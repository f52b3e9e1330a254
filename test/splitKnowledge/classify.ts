import { expect } from 'vitest';

// The attacker's side of the split-knowledge suite (docs/security.md). A classifier looks at what
// one bot observed and scores each of its six profiles; its guess is the best-scored profile.
// Accuracy is counted exactly over ties (a tie of k profiles that includes the real one scores
// 1/k), so a channel that shows nothing scores exactly 1/6 and randomness in tie-breaking adds no
// noise. The goal is accuracy ≤ 1/6 + 0.05 for every classifier.

export const CHANCE = 1 / 6;
export const LIMIT = CHANCE + 0.05;

export interface Trial<O> {
  real: number;
  observed: O;
}

/** Scores per profile index (1–6); higher means "more likely the real one". */
export type Classifier<O> = (observed: O) => number[];

export function accuracy<O>(trials: Trial<O>[], classify: Classifier<O>): number {
  let credit = 0;
  for (const t of trials) {
    const scores = classify(t.observed);
    const best = Math.max(...scores);
    const top = scores.flatMap((s, i) => (s === best || Math.abs(s - best) < 1e-9 ? [i + 1] : []));
    if (top.includes(t.real)) credit += 1 / top.length;
  }
  return credit / trials.length;
}

export interface JudgeOptions {
  /** Classifiers printed but not judged, with the reason (a known residual channel). */
  residual?: Record<string, string>;
}

function accuracies<O>(
  trials: Trial<O>[],
  classifiers: Record<string, Classifier<O>>,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, classify] of Object.entries(classifiers)) out[name] = accuracy(trials, classify);
  return out;
}

/** Prints every classifier's accuracy for the channel and fails any above the limit (unless listed as residual). */
export function judge<O>(
  channel: string,
  trials: Trial<O>[],
  classifiers: Record<string, Classifier<O>>,
  options: JudgeOptions = {},
): Record<string, number> {
  const out = accuracies(trials, classifiers);
  const lines = Object.entries(out).map(
    ([name, a]) =>
      `  ${channel} / ${name}: ${a.toFixed(3)} over ${trials.length}${options.residual?.[name] ? ` (residual: ${options.residual[name]})` : ''}`,
  );
  console.log(`[split-knowledge] ${channel} (limit ${LIMIT.toFixed(3)})\n${lines.join('\n')}`);
  for (const [name, a] of Object.entries(out)) {
    if (options.residual?.[name]) continue;
    expect(a, `${channel} / ${name}`).toBeLessThanOrEqual(LIMIT);
  }
  return out;
}

/**
 * Judges classifiers of noisy observations (wall-clock timings, the service's own random draws),
 * whose accuracy on an unchanged service is a binomial draw around 1/6 rather than exactly 1/6, in
 * two stages. The trials given are judged first; only if a classifier is above the limit over them
 * are as many trials again played (`more`), and the run fails if a classifier is above the limit
 * over all of them together. A failure thus needs some classifier above the limit over 2n trials:
 * on an unchanged service that happens with a chance of at most k · chanceOfFalseFailure(2n) for k
 * classifiers (under 2 · 10⁻⁸ for five classifiers over 2 × 1,000 trials, where one stage of 1,000
 * left 1.1 · 10⁻⁴). A leak is still caught: a classifier whose accuracy is the limit + 0.02 is above
 * it in both stages of 1,000 trials about nine runs in ten, and one at the limit + 0.04 in all but
 * about two runs in a thousand. The second stage costs time only in the runs that need it.
 */
export async function judgeNoisy<O>(
  channel: string,
  trials: Trial<O>[],
  classifiers: Record<string, Classifier<O>>,
  more: () => Promise<Trial<O>[]>,
  options: JudgeOptions = {},
): Promise<Record<string, number>> {
  const first = accuracies(trials, classifiers);
  const above = Object.entries(first).filter(([name, a]) => !options.residual?.[name] && a > LIMIT);
  if (above.length === 0) return judge(channel, trials, classifiers, options);
  console.log(
    `[split-knowledge] ${channel}: above the limit over ${trials.length} trials: ${above
      .map(([name, a]) => `${name} ${a.toFixed(3)}`)
      .join(', ')}; judging again over these and ${trials.length} more`,
  );
  const extra = await more();
  return judge(
    `${channel} (${trials.length} + ${extra.length} trials)`,
    [...trials, ...extra],
    classifiers,
    options,
  );
}

/** Sums of per-classifier ranks (tied scores share their average rank): the "combine them all" attacker. */
export function combine<O>(classifiers: Classifier<O>[]): Classifier<O> {
  return (o) => {
    const total = [0, 0, 0, 0, 0, 0];
    for (const c of classifiers) {
      const s = c(o).map((x) => (Number.isFinite(x) ? x : x > 0 ? 1e12 : -1e12));
      for (let i = 0; i < 6; i++) {
        const below = s.filter((x) => x < s[i]!).length;
        const equal = s.filter((x) => x === s[i]!).length;
        total[i]! += below + (equal - 1) / 2;
      }
    }
    return total;
  };
}

/**
 * P(accuracy > LIMIT) for a classifier that sees nothing, over n trials: its hits are a binomial
 * (n, 1/6) draw when the observations of a trial do not tie (continuous timings, say), since the real
 * index is uniform and independent of them. A channel judged on noisy observations must use enough
 * trials that the sum of this over its classifiers stays below 1/1000 (Bonferroni), so that the
 * suite fails by chance less than once in a thousand runs. Tied observations (the same work or the
 * same fake-clock time on every profile) score exactly 1/6 and add nothing to it.
 */
export function chanceOfFalseFailure(n: number): number {
  const k = Math.floor(LIMIT * n + 1e-9);
  // Upper tail of the binomial, summed in log space from k + 1 to n.
  const logChoose = (m: number, j: number) => lgamma(m + 1) - lgamma(j + 1) - lgamma(m - j + 1);
  let tail = 0;
  for (let j = k + 1; j <= n; j++) {
    tail += Math.exp(logChoose(n, j) + j * Math.log(CHANCE) + (n - j) * Math.log(1 - CHANCE));
  }
  return tail;
}

/** log Γ(x) (Lanczos), for the binomial tail. */
function lgamma(x: number): number {
  const g = [
    676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059, 12.507343278686905,
    -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
  ];
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - lgamma(1 - x);
  let a = 0.99999999999980993;
  const t = x - 1 + 7.5;
  for (let i = 0; i < g.length; i++) a += (g[i] as number) / (x + i);
  return 0.5 * Math.log(2 * Math.PI) + (x - 0.5) * Math.log(t) - t + Math.log(a);
}

/** Six scores from a function of the profile index. */
export const per = (f: (index: number) => number): number[] => [1, 2, 3, 4, 5, 6].map(f);

export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** A seeded PRNG for the simulated owners and attackers (reproducible worlds). */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
