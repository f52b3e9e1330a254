import { subtractFromCounters } from '../spend/counters.ts';
import { emitEvent } from '../events/outbox.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { notFound } from '../platform/errors.ts';
import { consumeRateLimit, tooMany } from '../platform/rateLimit.ts';
import { microsToUsd } from '../platform/money.ts';
import { x402Moves } from '../wallet/ledger.ts';
import { storedRequirement, type X402PaymentRow, x402CounterSpecs } from './service.ts';
import type { PaymentPayloadV1 } from './sign.ts';
import { requireX402Config } from './wallet.ts';
import type { PaymentPayload } from '@x402/core/types';

// A seller refused a signed payment: its answer to the service's own request (src/x402/fetch.ts),
// or the bot's report of the seller's answer (POST /api/v1/bot/x402/payments/{id}/refusal, sent by
// the SDK's x402 clients). Neither is taken on trust: a seller or a bot can say "refused" about an
// authorisation that can still move money. The service asks the reference facilitator's
// verification, run against the chain itself (src/x402/facilitator.ts): when it finds a lasting
// reason (a signature made for another EIP-712 domain, …) the authorisation can never be used, and
// the payment is released at once — status refused, x402_authorized → x402_available, the spend
// counters given back, event x402.refused (paid: false) and never purchase.approved. Otherwise the
// amount stays reserved until the chain says what happened: settled, or lapsed at valid_before
// (src/x402/reconcile.ts).

export interface RefusalOutcome {
  released: boolean;
  /** The facilitator's reason, or null when the authorisation is still valid. */
  reason: string | null;
  row: X402PaymentRow;
}

export async function checkRefusal(
  ctx: AppContext,
  botId: string,
  paymentId: string,
  sellerReason: string | null,
): Promise<RefusalOutcome> {
  const cfg = requireX402Config(ctx);
  const row = await maybeOne<X402PaymentRow>(
    ctx.db,
    'SELECT * FROM x402_payments WHERE id = $1 AND bot_id = $2',
    [paymentId, botId],
  );
  if (!row) throw notFound('Payment');
  if (row.status !== 'authorized' || !row.payload_enc) return { released: false, reason: null, row };
  const payload = JSON.parse(ctx.secrets.decrypt(row.payload_enc)) as PaymentPayload | PaymentPayloadV1;
  const { verifyAuthorization } = await import('./facilitator.ts');
  let verdict: Awaited<ReturnType<typeof verifyAuthorization>>;
  try {
    verdict = await verifyAuthorization(cfg, row.pay_from, storedRequirement(row), payload);
  } catch (err) {
    // The chain could not be read: nothing is released on a guess.
    ctx.logger.warn({ err, payment_id: paymentId }, 'could not verify a refused x402 payment');
    return { released: false, reason: null, row };
  }
  if (!verdict.neverUsable) return { released: false, reason: verdict.reason, row };
  const now = ctx.clock.now();
  const released = await ctx.db.transaction(async (tx) => {
    const locked = await maybeOne<X402PaymentRow>(
      tx,
      `SELECT * FROM x402_payments WHERE id = $1 AND status = 'authorized' FOR UPDATE`,
      [paymentId],
    );
    if (!locked) return null;
    const amount = Number(locked.amount_micros);
    await subtractFromCounters(
      tx,
      x402CounterSpecs(botId, locked.owner_id),
      amount,
      new Date(locked.created_at).getTime(),
    );
    await x402Moves.refuse(tx, botId, amount, now, locked.id);
    await tx.query(
      `UPDATE x402_payments SET status = 'refused', refusal_reason = $2, finished_at = $3 WHERE id = $1`,
      [locked.id, verdict.reason, new Date(now)],
    );
    await emitEvent(tx, {
      botId,
      type: 'x402.refused',
      data: {
        payment_id: locked.id,
        amount: microsToUsd(amount),
        pay_to: locked.pay_to,
        paid: false,
        reason: verdict.reason,
        ...(sellerReason ? { seller_reason: sellerReason.slice(0, 200) } : {}),
        description: 'The seller refused the x402 payment; it was not paid and its amount is back',
      },
      at: now,
    });
    return {
      ...locked,
      status: 'refused' as const,
      refusal_reason: verdict.reason,
      finished_at: new Date(now),
    };
  });
  if (!released) {
    const current = await maybeOne<X402PaymentRow>(ctx.db, 'SELECT * FROM x402_payments WHERE id = $1', [
      paymentId,
    ]);
    return { released: false, reason: verdict.reason, row: current ?? row };
  }
  return { released: true, reason: verdict.reason, row: released };
}

/** POST /api/v1/bot/x402/payments/{id}/refusal: the bot's report, counted like payment requests. */
export async function reportRefusal(
  ctx: AppContext,
  botId: string,
  paymentId: string,
  sellerReason: string | null,
): Promise<RefusalOutcome> {
  const now = ctx.clock.now();
  const limited = await ctx.db.transaction((tx) =>
    consumeRateLimit(tx, {
      key: `x402refusal:${botId}`,
      limit: ctx.config.checkoutRateLimitPerHour,
      windowSeconds: 3600,
      now,
    }),
  );
  if (!limited.ok) throw tooMany(limited.retryAfterSeconds, 'refusal reports');
  return checkRefusal(ctx, botId, paymentId, sellerReason);
}
