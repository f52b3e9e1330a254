// Time comes from one injectable clock. Tests use FakeClock instead of sleeping.

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export class FakeClock implements Clock {
  private current: number;

  constructor(start: number | Date = Date.UTC(2026, 0, 5, 12, 0, 0)) {
    this.current = typeof start === 'number' ? start : start.getTime();
  }

  now(): number {
    return this.current;
  }

  set(at: number | Date): void {
    this.current = typeof at === 'number' ? at : at.getTime();
  }

  advance(ms: number): void {
    this.current += ms;
  }
}
