// Spending windows start at the start of the UTC day, the ISO week (Monday) or the UTC month.

export type WindowKind = 'day' | 'week' | 'month';

export function windowStart(kind: WindowKind, at: number): Date {
  const d = new Date(at);
  const day = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  if (kind === 'day') return new Date(day);
  if (kind === 'month') return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
  const isoWeekday = (d.getUTCDay() + 6) % 7; // Monday = 0
  return new Date(day - isoWeekday * 86_400_000);
}

export function windowEnd(kind: WindowKind, at: number): Date {
  const start = windowStart(kind, at);
  if (kind === 'day') return new Date(start.getTime() + 86_400_000);
  if (kind === 'week') return new Date(start.getTime() + 7 * 86_400_000);
  return new Date(Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + 1, 1));
}

export function iso(at: number | Date): string {
  return (typeof at === 'number' ? new Date(at) : at).toISOString();
}
