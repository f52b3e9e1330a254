import { describe, expect, it } from 'vitest';
import { ERROR_STATUS } from '../../../src/platform/errors.ts';
import { BOT_PAY_ERROR_CODES } from '../src/index.ts';

// The SDK's list of codes follows the service's error table: a code the service adds for bot routes
// (as `overloaded` was) must be added here too, so that `isBotPayError(e, code)` can name it.

/** Codes only owner routes and the dashboard answer. */
const OWNER_ONLY = new Set([
  'csrf_failed',
  'invalid_claim_token',
  'already_claimed',
  'not_pending',
  'possible_same_card',
]);
const TRANSPORT = new Set(['network_error', 'timeout', 'unexpected_response']);

describe('BOT_PAY_ERROR_CODES', () => {
  it('names every code of the service a bot can be answered, and nothing the service does not have', () => {
    const service = Object.keys(ERROR_STATUS).filter((code) => !OWNER_ONLY.has(code));
    const sdk = BOT_PAY_ERROR_CODES.filter((code) => !TRANSPORT.has(code));
    expect([...sdk].sort()).toEqual([...service].sort());
  });
});
