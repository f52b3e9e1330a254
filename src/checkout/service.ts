import { decoyMissingDigits, decoyProfile } from '../cards/decoys.ts';
import type { CardRow, CardSecret, ProfileSecret } from '../cards/service.ts';
import { emitEvent } from '../events/outbox.ts';
import { sendOwnerMailSoon } from '../notifications/job.ts';
import { LOW_BALANCE_MICROS } from '../owners/funding.ts';
import type { AppContext } from '../platform/context.ts';
import { sha256Hex } from '../platform/crypto.ts';
import type { Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { centsToMicros, microsToUsd } from '../platform/money.ts';
import { consumeRateLimit } from '../platform/rateLimit.ts';
import { iso } from '../platform/time.ts';
import { purchaseEventRow } from '../spend/events.ts';
import { refusalError } from '../spend/refusals.ts';
import type { SpendResult } from '../spend/result.ts';
import {
  type AttemptParams,
  type AttemptRefusal,
  type AttemptReplay,
  type AttemptResult,
  checkoutAlone,
  checkoutAttempt,
} from './attempt.ts';
import type { ApprovedBody, CheckoutBody, PendingBody } from './schemas.ts';
import { checkTaskForCheckout, onCheckoutDecided } from './taskLink.ts';

// POST /api/v1/bot/merchant/checkout: idempotency, rate limit, the guardrail chain and the hold or
// debit, all or nothing. The key lookup, the rate limit and the chain itself — wallet status → card
// resolution → card guardrails (per transaction, daily, monthly) → profile allowance → master
// guardrails → funds → approval mode — and its writes run in one database call, spend_run with the
// method 'card' (src/migrations/functions/spend_run.sql, the one guardrail chain of both rails,
// called through src/checkout/attempt.ts and src/spend/run.ts): a dozen
// statements without a dozen round trips. It locks the key, the bot's rate-limit row, counter rows
// card (the profile's card row, with its allowance) → owner → bot, and the wallet row last. The Idempotency-Key is kept on the
// confirmation row, and a replay is rebuilt from it (replayAnswer).
//
// The call runs as a statement on its own (one round trip instead of BEGIN, call, COMMIT; the
// locks it takes are held until its own commit, not until the service's COMMIT arrives) unless
// the checkout has more to write with it: a purchase for a task (its state moves with it) or one
// that takes the visible balance below the low mark (the wallet.balance_low event). Those run in a
// transaction. The answer is built after the commit, from what the call returned: if building it
// failed (a damaged card secret; a wrong SECRET_KEY as a whole is refused at start-up, src/server.ts
// checkSecretKey), the purchase stays recorded, as after a crash
// between the commit and the answer, and a retry with the same Idempotency-Key answers it.

/** The request body, as the route's schema validated it. */
export type CheckoutRequest = CheckoutBody;

/** A checkout's answer, typed by the route's response schemas (200 approved, 202 held). */
export type CheckoutAnswer = (
  | { statusCode: 200; body: ApprovedBody }
  | { statusCode: 202; body: PendingBody }
) &
  Pick<SpendResult, 'heldForOwner' | 'balanceLow'>;

export const APPROVED_MESSAGE =
  'Purchase approved. Complete the card number of your profile with missing_digits and use the expiry shown.';
export const PENDING_MESSAGE =
  'Purchase held for owner approval. Poll /api/v1/bot/merchant/checkout/status with the confirmation_id until it is decided or expires.';

/**
 * Card digits and expiry returned for an approved checkout. Format 2: the profile's own entry of
 * profiles_enc (the same shape and the same work for the real profile and a decoy). Legacy cards:
 * the real secret or the derived decoy's.
 */
export function cardDetails(
  ctx: AppContext,
  card: Pick<CardRow, 'id' | 'secret_enc' | 'profiles_enc' | 'missing_position' | 'created_at'>,
  profileIndex: number,
  isReal: boolean,
): CardSecret {
  if (card.profiles_enc) {
    const all = JSON.parse(ctx.secrets.decrypt(card.profiles_enc)) as ProfileSecret[];
    const p = all.find((x) => x.profile_index === profileIndex);
    if (!p) throw new Error(`card ${card.id} has no profile ${profileIndex}`);
    return { missing_digits: p.missing_digits, expiry_month: p.expiry_month, expiry_year: p.expiry_year };
  }
  if (isReal) {
    if (!card.secret_enc) throw new Error(`card ${card.id} has no secret`);
    return JSON.parse(ctx.secrets.decrypt(card.secret_enc)) as CardSecret;
  }
  const decoy = decoyProfile(ctx.secrets, card.id, profileIndex, new Date(card.created_at).getUTCFullYear());
  return {
    missing_digits: decoyMissingDigits(decoy, card.missing_position),
    expiry_month: decoy.expiryMonth,
    expiry_year: decoy.expiryYear,
  };
}

export function requestHash(req: CheckoutRequest): string {
  return sha256Hex(
    JSON.stringify([
      req.profile_index,
      req.merchant_name,
      req.merchant_url,
      req.item_name,
      req.amount_cents,
      req.category ?? null,
      req.task_id ?? null,
      req.card_id ?? null,
    ]),
  );
}

export async function checkout(
  ctx: AppContext,
  botId: string,
  req: CheckoutRequest,
  idempotencyKey: string | undefined,
): Promise<CheckoutAnswer> {
  const now = ctx.clock.now();
  let result: (CheckoutAnswer & { replayed: boolean }) | null = null;
  try {
    const params = attemptParams(ctx, botId, req, idempotencyKey, now);
    if (req.task_id === undefined) {
      const r = await checkoutAlone(ctx.db, params, LOW_BALANCE_MICROS, ctx.config.spendBatch);
      if (r !== null) result = answer(ctx, req, params, r, false);
    }
    result ??= await ctx.db.transaction((tx) => runChain(ctx, tx, req, params));
  } catch (error) {
    // A refused checkout rolled back with its transaction, rate-limit hit included; it still counts
    // toward the hourly limit, or a bot could probe its guardrails without end.
    if (error instanceof ApiError) ctx.metrics.checkoutDecisions.inc({ outcome: error.code });
    if (error instanceof ApiError && error.code !== 'rate_limited' && error.status < 500) {
      await ctx.db
        .transaction((tx) => consumeRateLimit(tx, checkoutLimit(ctx, botId, now)))
        .catch((err) => ctx.logger.warn({ err }, 'could not count a refused checkout'));
    }
    throw error;
  }
  ctx.metrics.checkoutDecisions.inc({ outcome: result.statusCode === 200 ? 'approved' : 'pending' });
  if (!result.replayed && (result.heldForOwner || result.balanceLow)) {
    // The mail is due from rows this transaction wrote; send it now rather than at the job's next
    // tick (the job retries whatever this misses, including after a crash right here).
    sendOwnerMailSoon(ctx);
  }
  // Only the answer: the flags above are never sent.
  return result.statusCode === 200
    ? { statusCode: 200, body: result.body }
    : { statusCode: 202, body: result.body };
}

/** The bot's hourly checkout limit: approved, held and refused requests all count. */
function checkoutLimit(ctx: AppContext, botId: string, now: number) {
  return { key: `checkout:${botId}`, limit: ctx.config.checkoutRateLimitPerHour, windowSeconds: 3600, now };
}

/** The refusal of a card purchase, as the spec's error: the card's own here, the shared ones in src/spend/refusals.ts. */
function checkoutRefusalError(r: AttemptRefusal): ApiError {
  switch (r.error) {
    case 'card_not_found':
      return new ApiError('card_not_found', 'card_id was not found or is not linked to this bot.');
    case 'card_not_active':
      return new ApiError('card_not_active', 'There is no active self-hosted card for this bot.');
    case 'card_id_required':
      return new ApiError('card_id_required', 'This bot has several active cards: name one with card_id.');
    case 'invalid_profile':
      return new ApiError('invalid_profile', 'No permissions found for the given profile_index.');
    default:
      return refusalError('card_wallet', r);
  }
}

/** The call's parameters: new ids, the purchase.approved event row, the rate limit. */
function attemptParams(
  ctx: AppContext,
  botId: string,
  req: CheckoutRequest,
  idempotencyKey: string | undefined,
  now: number,
): AttemptParams {
  const id = newId('chk');
  const event = purchaseEventRow(
    'purchase.approved',
    {
      id,
      botId,
      amountMicros: centsToMicros(req.amount_cents),
      merchantName: req.merchant_name,
      itemName: req.item_name,
    },
    now,
  );
  const limit = checkoutLimit(ctx, botId, now);
  return {
    botId,
    cardId: req.card_id ?? null,
    profileIndex: req.profile_index,
    amountMicros: centsToMicros(req.amount_cents),
    category: trimmedCategory(req),
    confirmationId: id,
    merchantName: req.merchant_name,
    merchantUrl: req.merchant_url,
    itemName: req.item_name,
    taskId: req.task_id ?? null,
    now,
    approvalWindowSeconds: ctx.config.approvalWindowSeconds,
    ledgerTransactionId: newId('ltx'),
    eventId: event.id,
    eventBody: event.body,
    rateKey: limit.key,
    rateLimit: limit.limit,
    idempotencyKey: idempotencyKey ?? null,
    requestHash: idempotencyKey === undefined ? null : requestHash(req),
  };
}

function trimmedCategory(req: CheckoutRequest): string | null {
  return req.category?.trim() ? req.category.trim() : null;
}

/** The checkout in the caller's transaction, with what it writes beside the call. */
async function runChain(
  ctx: AppContext,
  tx: Queryable,
  req: CheckoutRequest,
  p: AttemptParams,
): Promise<CheckoutAnswer & { replayed: boolean }> {
  const r = await checkoutAttempt(tx, p);
  if (r.ok !== true) return answer(ctx, req, p, r, false);
  // The visible balance moves alike for every profile, and so does its low-balance event.
  const balanceLow = await emitBalanceLowIfCrossed(
    tx,
    p.botId,
    r.availableBeforeMicros,
    r.availableBeforeMicros - p.amountMicros,
    p.now,
  );
  if (req.task_id !== undefined) {
    // Inside the transaction: the tasks work can refuse (throw) and everything rolls back.
    await checkTaskForCheckout(tx, {
      botId: p.botId,
      taskId: req.task_id,
      cardId: r.cardId,
      profileIndex: req.profile_index,
      amountMicros: p.amountMicros,
      merchantName: req.merchant_name,
      merchantUrl: req.merchant_url,
      itemName: req.item_name,
      category: p.category,
      at: p.now,
    });
    await onCheckoutDecided(tx, {
      botId: p.botId,
      taskId: req.task_id,
      confirmationId: p.confirmationId,
      status: r.held ? 'pending' : 'approved',
      at: p.now,
    });
  }
  return answer(ctx, req, p, r, balanceLow);
}

/** The answer to the bot from the call's result; a refusal is thrown as the spec's error. */
function answer(
  ctx: AppContext,
  req: CheckoutRequest,
  p: AttemptParams,
  r: AttemptResult,
  balanceLow: boolean,
): CheckoutAnswer & { replayed: boolean } {
  if (r.ok === 'replay') return { ...replayAnswer(ctx, r.replay), replayed: true };
  if (!r.ok) throw checkoutRefusalError(r.refusal);
  const common: AnswerCommon = {
    confirmation_id: p.confirmationId,
    profile_index: req.profile_index,
    merchant_name: req.merchant_name,
    amount_usd: microsToUsd(p.amountMicros),
  };
  if (r.held) {
    return {
      ...pendingAnswer(common, p.now + ctx.config.approvalWindowSeconds * 1000),
      // Every hold, on any profile, asks the owner: the same mail, the same inbox, the same work.
      heldForOwner: p.confirmationId,
      ...(balanceLow ? { balanceLow } : {}),
      replayed: false,
    };
  }
  const card = {
    id: r.cardId,
    secret_enc: r.secretEnc,
    profiles_enc: r.profilesEnc,
    missing_position: r.missingPosition,
    created_at: r.cardCreatedAt,
  };
  return {
    ...approvedAnswer(common, cardDetails(ctx, card, req.profile_index, r.isReal)),
    ...(balanceLow ? { balanceLow } : {}),
    replayed: false,
  };
}

interface AnswerCommon {
  confirmation_id: string;
  profile_index: number;
  merchant_name: string;
  amount_usd: number;
}

function pendingAnswer(common: AnswerCommon, expiresAt: number | Date): CheckoutAnswer {
  return {
    statusCode: 202,
    body: {
      approved: false,
      status: 'pending_confirmation',
      ...common,
      expires_at: iso(expiresAt),
      message: PENDING_MESSAGE,
    },
  };
}

function approvedAnswer(common: AnswerCommon, details: CardSecret): CheckoutAnswer {
  return {
    statusCode: 200,
    body: {
      approved: true,
      missing_digits: details.missing_digits,
      expiry_month: details.expiry_month,
      expiry_year: details.expiry_year,
      ...common,
      message: APPROVED_MESSAGE,
    },
  };
}

/**
 * The first answer of an Idempotency-Key, again: rebuilt from its confirmation exactly as it was
 * built then (a held purchase answers 202 with its expiry whatever was decided since; the card's
 * digits and expiry never change after activation), or, for a key used before migration 0023,
 * the response stored encrypted in checkout_idempotency.
 */
function replayAnswer(ctx: AppContext, replay: AttemptReplay): CheckoutAnswer {
  if (replay.kind === 'stored') {
    // Written by the previous version from the same response shapes.
    const body: unknown = JSON.parse(ctx.secrets.decrypt(replay.responseEnc));
    return replay.statusCode === 200
      ? { statusCode: 200, body: body as ApprovedBody }
      : { statusCode: 202, body: body as PendingBody };
  }
  const common: AnswerCommon = {
    confirmation_id: replay.confirmationId,
    profile_index: replay.profileIndex,
    merchant_name: replay.merchantName,
    amount_usd: microsToUsd(replay.amountMicros),
  };
  if (replay.held) {
    if (replay.expiresAt === null)
      throw new Error(`held confirmation ${replay.confirmationId} has no expiry`);
    return pendingAnswer(common, replay.expiresAt);
  }
  return approvedAnswer(common, cardDetails(ctx, replay.card, replay.profileIndex, replay.isReal));
}

/** wallet.balance_low once per crossing below LOW_BALANCE_MICROS. */
export async function emitBalanceLowIfCrossed(
  tx: Queryable,
  botId: string,
  beforeMicros: number,
  afterMicros: number,
  at: number,
): Promise<boolean> {
  if (beforeMicros >= LOW_BALANCE_MICROS && afterMicros < LOW_BALANCE_MICROS) {
    await emitEvent(tx, {
      botId,
      type: 'wallet.balance_low',
      data: {
        balance: microsToUsd(afterMicros),
        threshold: microsToUsd(LOW_BALANCE_MICROS),
        description: `Wallet balance fell below $${microsToUsd(LOW_BALANCE_MICROS).toFixed(2)}`,
      },
      at,
    });
    return true;
  }
  return false;
}
