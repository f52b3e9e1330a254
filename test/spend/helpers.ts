import { setupCard, type TestCard } from '../checkout/helpers.ts';
import {
  activeBot,
  createOwner,
  giveGenerousBudgets,
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
