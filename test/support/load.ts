import { availableParallelism, loadavg } from 'node:os';

// `npm test` on a busy machine: the timing-sensitive worlds (split knowledge, the
// task-indistinguishability world, the pack test) can run past their timeouts although nothing is
// wrong, and nothing said why (issue 35, item 2). globalSetup.ts prints one line when the machine
// is already busy as the suite starts, and one at the end when it was busy meanwhile, so a timeout
// reads as what it probably is.

/** The whole suite on a quiet two-core machine, as the README says. */
export const SUITE_MINUTES = 15;

/** One line when the one-minute load is above the number of cores, else nothing. */
export function loadNotice(
  when: 'start' | 'end',
  load = loadavg()[0] ?? 0,
  cores = availableParallelism(),
): string | undefined {
  if (load <= cores) return undefined;
  const figure = `load ${load.toFixed(1)} on ${cores} core${cores === 1 ? '' : 's'}`;
  return when === 'start'
    ? `Note: this machine is busy (${figure}) as the tests start: timing-sensitive suites may time out, and the run takes longer than the ${SUITE_MINUTES} minutes or so of a quiet 2-core machine.`
    : `Note: this machine was busy during the run (${figure} at the end): a timeout above may be the load, not a bug; run the failing file again on a quieter machine.`;
}
