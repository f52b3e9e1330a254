import { newId, newTimeOrderedId } from '../../src/platform/ids.ts';
import type { SpendParams } from '../../src/spend/run.ts';
import { setupCard, type TestCard } from '../checkout/helpers.ts';
import {
  activeBot,
  createOwner,
  giveGenerousBudgets,
  putGuardrails,
  type TestOwner,
  type TestService,
} from '../support/service.ts';

/**
 * An owner with generous master budgets and one bot funded with $1,000, whose card approves a
 * purchase under $10 at once and holds one at or above (wide card limits): the setting in which
 * spend_run is called directly, on both modes and both kinds of profile.
 */
export async function botWithHoldingCard(
  svc: TestService,
): Promise<{ owner: TestOwner; botId: string; card: TestCard }> {
  const owner = await createOwner(svc);
  await giveGenerousBudgets(svc, owner);
  const botId = (await activeBot(svc, owner, { fundCents: 100_000 })).bot_id;
  const card = await setupCard(svc, owner, botId, {
    approval_mode: 'auto_approve_under_threshold',
    approval_threshold_cents: 1000,
    per_transaction_cents: 100_000,
    daily_cents: 10_000_000,
    monthly_cents: 100_000_000,
  });
  return { owner, botId, card };
}

/** An owner whose master budget allows `dailyCents` a day (and far more a month and a purchase). */
export async function ownerWithDailyBudget(svc: TestService, dailyCents: number): Promise<TestOwner> {
  const owner = await createOwner(svc);
  await putGuardrails(svc, owner, {
    per_transaction_cents: 100_000,
    daily_budget_cents: dailyCents,
    monthly_budget_cents: 100_000_000,
  });
  return owner;
}

/**
 * spend_run's parameters for one purchase of `botId` by `method`, as the rails would send them: a
 * card purchase carries its purchase.approved event row, an x402 payment none. Rate-limited under
 * `rateKey`, far above what a test spends.
 */
export function spendParams(
  svc: TestService,
  botId: string,
  method: SpendParams['method'],
  amountMicros: number,
  rateKey: string,
): SpendParams {
  const byCard = method.kind === 'card';
  return {
    botId,
    method,
    amountMicros,
    category: byCard ? 'retail' : 'x402',
    confirmationId: newId('chk'),
    merchantName: 'Acme',
    merchantUrl: 'https://acme.example/',
    itemName: 'A book',
    taskId: null,
    now: svc.clock.now(),
    approvalWindowSeconds: 900,
    ledgerTransactionId: newId('ltx'),
    eventId: byCard ? newTimeOrderedId('evt', svc.clock.now()) : null,
    eventBody: byCard ? '{}' : null,
    rateKey,
    rateLimit: 100_000,
    idempotencyKey: null,
    requestHash: null,
  };
}
