import { describe, expect, it } from 'vitest';
import { loadNotice, SUITE_MINUTES } from '../support/load.ts';

// The one line `npm test` prints on a busy machine (test/support/globalSetup.ts).
describe('load notice', () => {
  it('says nothing on a quiet machine, one line naming the load on a busy one', () => {
    expect(loadNotice('start', 1.5, 2)).toBeUndefined();
    expect(loadNotice('end', 2, 2)).toBeUndefined();
    const start = loadNotice('start', 5.25, 2);
    expect(start).toMatch(/^Note: this machine is busy \(load 5\.3 on 2 cores\)/);
    expect(start).toContain(`${SUITE_MINUTES} minutes`);
    expect(start).not.toContain('\n');
    expect(loadNotice('end', 3, 1)).toMatch(
      /^Note: this machine was busy during the run \(load 3\.0 on 1 core at the end\)/,
    );
  });
});
