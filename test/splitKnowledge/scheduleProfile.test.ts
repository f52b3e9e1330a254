import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, type TestService } from '../support/service.ts';
import { createSchedule, HOUR, nextTask, scheduleBody, tick, world } from '../tasks/helpers.ts';
import { CHANCE, combine, judge, per, type Trial } from './classify.ts';

// Channel: a schedule named on a decoy profile. Shadows used to skip the real profile and the one
// the schedule named, so a schedule on a decoy left the real profile the one profile never tasked.
// A schedule buys for real now: it uses the real profile (naming another is refused), and every
// other profile gets a shadow. The attacker sees the tasks the bot is handed.
//
// Deterministic: an hourly schedule keeps its times for every shadow, so after a due time each of
// the six profiles has been tasked exactly once (the classifiers tie at exactly 1/6).

const OWNERS = Number(process.env.SPLIT_KNOWLEDGE_SCHEDULE_OWNERS ?? 12);

interface Observed {
  /** tasked[i - 1]: how many tasks named profile i. */
  tasked: number[];
}

let svc: TestService;
const trials: Trial<Observed>[] = [];

beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
  for (let i = 0; i < OWNERS; i++) {
    const w = await world(svc, { wideMaster: true });
    const decoy = w.card.real_profile_index === 1 ? 2 : 1;
    // Naming a decoy profile is refused and stores nothing.
    const refused = await createSchedule(svc, w, scheduleBody(w.card, {}, { profile_index: decoy }));
    expect(refused.statusCode).toBe(400);
    expect(refused.json()).toMatchObject({ error: 'validation_error', field: 'instructions.profile_index' });
    const { profile_index: _named, ...instructions } = scheduleBody(w.card).instructions;
    const created = await createSchedule(svc, w, { ...scheduleBody(w.card), instructions });
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json().instructions.profile_index).toBe(w.card.real_profile_index);
    svc.clock.set(Date.parse(created.json().next_run_at));
    await tick(svc);
    const tasked = [0, 0, 0, 0, 0, 0];
    for (let n = 0; n < 12; n++) {
      const task = await nextTask(svc, w.bot);
      if (!task.has_task || !task.instructions) break;
      tasked[(task.instructions.profile_index as number) - 1]! += 1;
      // Fulfilled (a schedule's purchase is approved by the schedule), so the next one is handed out.
      const res = await svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/merchant/checkout',
        headers: w.bot.auth,
        payload: { ...task.instructions, task_id: task.task_id },
      });
      expect(res.statusCode, res.body).toBe(200);
    }
    trials.push({ real: w.card.real_profile_index, observed: { tasked } });
    svc.clock.advance(HOUR);
  }
}, 600_000);

afterAll(async () => {
  await svc?.close();
});

describe('split knowledge: the profile a schedule names', () => {
  it('every profile is tasked, whichever the schedule could have named', () => {
    const classifiers = {
      'the never-tasked profile': (o: Observed) => per((i) => ((o.tasked[i - 1] ?? 0) === 0 ? 1 : 0)),
      'the least-tasked profile': (o: Observed) => per((i) => -(o.tasked[i - 1] ?? 0)),
      'the most-tasked profile': (o: Observed) => per((i) => o.tasked[i - 1] ?? 0),
    };
    const out = judge('a schedule on a decoy profile', trials, {
      ...classifiers,
      'all combined': combine(Object.values(classifiers)),
    });
    for (const [name, a] of Object.entries(out)) expect(a, name).toBeCloseTo(CHANCE, 9);
    for (const t of trials) expect(t.observed.tasked).toEqual([1, 1, 1, 1, 1, 1]);
  });
});
