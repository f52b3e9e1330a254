import { describe, expect, it } from 'vitest';
import { usd } from '../../src/dashboard/views/layout.ts';
import {
  centsToMicros,
  microsToCentsFloor,
  microsToUsd,
  optionalCentsToMicros,
  parseUsdToMicros,
  usdText,
} from '../../src/platform/money.ts';

// Money inside the service is micro-dollars (src/platform/money.ts); the edges convert.

describe('money conversions', () => {
  it('cents → micros → USD, exact to the micro', () => {
    expect(centsToMicros(450)).toBe(4_500_000);
    expect(microsToUsd(4_500_000)).toBe(4.5);
    expect(microsToUsd(1_000)).toBe(0.001);
    expect(microsToUsd(1)).toBe(0.000001);
    expect(microsToUsd(12_345)).toBe(0.012345);
    expect(microsToUsd(100_000_000_000)).toBe(100_000);
    expect(microsToCentsFloor(4_509_999)).toBe(450);
    expect(optionalCentsToMicros(undefined)).toBeNull();
    expect(optionalCentsToMicros(0)).toBe(0);
  });

  it('text: whole cents as two decimals, smaller amounts to the micro', () => {
    expect(usdText(1_000)).toBe('$0.001');
    expect(usdText(1)).toBe('$0.000001');
    expect(usdText(4_500_000)).toBe('$4.50');
    expect(usdText(125_000_000_000)).toBe('$125000.00');
    expect(usd(0.001)).toBe('$0.001');
    expect(usd(1250)).toBe('$1,250.00');
    expect(usd(-0.5)).toBe('−$0.50');
  });

  it('parses USD inputs to micros, with the decimals allowed', () => {
    expect(parseUsdToMicros('0.001')).toBe(1_000);
    expect(parseUsdToMicros('$1,250.50')).toBe(1_250_500_000);
    expect(parseUsdToMicros('25')).toBe(25_000_000);
    expect(parseUsdToMicros('0.001', 2)).toBeUndefined();
    expect(parseUsdToMicros('0.0000001')).toBeUndefined();
    expect(parseUsdToMicros('1e3')).toBeUndefined();
    expect(parseUsdToMicros(12)).toBeUndefined();
  });
});
