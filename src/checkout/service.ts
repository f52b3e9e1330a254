import { randomInt } from 'node:crypto';
import { decoyMissingDigits, decoyProfile } from '../cards/decoys.ts';
import type { CardRow, CardSecret, ProfileRow } from '../cards/service.ts';
import { emitEvent } from '../events/outbox.ts';
import { LOW_BALANCE_CENTS } from '../owners/service.ts';
import type { AppContext } from '../platform/context.ts';
import { sha256Hex } from '../platform/crypto.ts';
import { maybeOne, type Queryable } from '../platform/db/port.ts';
import { ApiError } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { centsToUsd } from '../platform/money.ts';
import { consumeRateLimit } from '../platform/rateLimit.ts';
import { iso } from '../platform/time.ts';
import { debitPurchase, placeHold } from '../wallet/ledger.ts';
import { rateLimited } from '../bots/register.ts';
import { addToCounters } from './counters.ts';
import {
  counterSpecs,
  limitError,
  needsApproval,
  perTransactionError,
  type PurchaseScope,
} from './guardrails.ts';
import { claimIdempotencyKey, saveIdempotentResponse } from './idempotency.ts';
import { checkTaskForCheckout, onCheckoutDecided } from './taskLink.ts';

// POST /api/v1/bot/merchant/checkout: the guardrail chain (SPEC §4.4) and the hold or debit, all in
// one transaction. Order: wallet status → card resolution and card guardrails (per transaction,
// daily, monthly) → profile allowance → master guardrails (real profile only) → funds → approval
// mode. Counter rows are locked card → profile → owner → bot, and the wallet row last.

export interface CheckoutRequest {
  profile_index: number;
  merchant_name: string;
  merchant_url: string;
  item_name: string;
  amount_cents: number;
  category?: string;
  task_id?: string;
  card_id?: string;
}

export interface CheckoutResult {
  statusCode: 200 | 202;
  body: Record<string, unknown>;
}

export const APPROVED_MESSAGE =
  'Purchase approved. Complete the card number of your profile with missing_digits and use the expiry shown.';
export const PENDING_MESSAGE =
  'Purchase held for owner approval. Poll /api/v1/bot/merchant/checkout/status with the confirmation_id until it is decided or expires.';

interface BotState {
  owner_id: string | null;
  wallet_status: 'pending' | 'active' | 'frozen';
  master_per_transaction_cents: number | null;
  master_daily_cents: number | null;
  master_monthly_cents: number | null;
  [key: string]: unknown;
}

/** Card digits and expiry returned for an approved checkout: the real secret or the decoy's. */
export function cardDetails(
  ctx: AppContext,
  card: Pick<CardRow, 'id' | 'secret_enc' | 'missing_position' | 'created_at'>,
  profileIndex: number,
  isReal: boolean,
): CardSecret {
  if (isReal) return JSON.parse(ctx.secrets.decrypt(card.secret_enc!)) as CardSecret;
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

async function resolveCard(tx: Queryable, botId: string, cardId: string | undefined): Promise<CardRow> {
  if (cardId !== undefined) {
    const card = await maybeOne<CardRow>(tx, 'SELECT * FROM cards WHERE id = $1 AND bot_id = $2', [
      cardId,
      botId,
    ]);
    if (!card) throw new ApiError('card_not_found', 'card_id was not found or is not linked to this bot.');
    if (card.status !== 'active') throw new ApiError('card_not_active', 'This card is not active.');
    return card;
  }
  const cards = await tx.query<CardRow>(
    `SELECT * FROM cards WHERE bot_id = $1 AND status = 'active' ORDER BY created_at LIMIT 2`,
    [botId],
  );
  if (cards.length === 0)
    throw new ApiError('card_not_active', 'There is no active self-hosted card for this bot.');
  if (cards.length > 1) {
    throw new ApiError('card_id_required', 'This bot has several active cards: name one with card_id.');
  }
  return cards[0]!;
}

/** A plausible time for the service to decide a held decoy: like an owner who answers in minutes. */
function decoyDecision(
  now: number,
  windowMs: number,
): { decideAt: number; outcome: 'approved' | 'denied' | 'expired' } {
  const roll = randomInt(100);
  if (roll < 5) return { decideAt: now + windowMs, outcome: 'expired' };
  const earliest = Math.min(20_000, Math.floor(windowMs / 4));
  const latest = Math.max(earliest + 1, Math.min(600_000, Math.floor((windowMs * 2) / 3)));
  return { decideAt: now + randomInt(earliest, latest), outcome: roll < 15 ? 'denied' : 'approved' };
}

export async function checkout(
  ctx: AppContext,
  botId: string,
  req: CheckoutRequest,
  idempotencyKey: string | undefined,
): Promise<CheckoutResult> {
  const now = ctx.clock.now();
  const hash = idempotencyKey === undefined ? '' : requestHash(req);
  return ctx.db.transaction(async (tx) => {
    if (idempotencyKey !== undefined) {
      const replay = await claimIdempotencyKey(ctx, tx, botId, idempotencyKey, hash, now);
      if (replay) return replay;
    }
    const result = await runChain(ctx, tx, botId, req, now);
    if (idempotencyKey !== undefined) await saveIdempotentResponse(ctx, tx, botId, idempotencyKey, result);
    return result;
  });
}

async function runChain(
  ctx: AppContext,
  tx: Queryable,
  botId: string,
  req: CheckoutRequest,
  now: number,
): Promise<CheckoutResult> {
  const limited = await consumeRateLimit(tx, {
    key: `checkout:${botId}`,
    limit: ctx.config.checkoutRateLimitPerHour,
    windowSeconds: 3600,
    now,
  });
  if (!limited.ok) throw rateLimited(limited.retryAfterSeconds, 'checkout requests');

  // 1. Wallet status.
  const state = (
    await tx.query<BotState>(
      `SELECT b.owner_id, w.status AS wallet_status, o.master_per_transaction_cents, o.master_daily_cents,
              o.master_monthly_cents
         FROM bots b JOIN wallets w ON w.bot_id = b.id LEFT JOIN owners o ON o.id = b.owner_id
        WHERE b.id = $1`,
      [botId],
    )
  )[0]!;
  if (state.owner_id === null || state.wallet_status === 'pending') {
    throw new ApiError('wallet_not_active', 'The wallet is not active: your owner has not claimed you yet.');
  }
  if (state.wallet_status === 'frozen')
    throw new ApiError('wallet_frozen', 'The wallet is frozen by the owner.');
  const ownerId = state.owner_id;

  // 2. Card resolution and the profile named by the request.
  const card = await resolveCard(tx, botId, req.card_id);
  const profile = await maybeOne<ProfileRow>(
    tx,
    'SELECT * FROM card_profiles WHERE card_id = $1 AND profile_index = $2',
    [card.id, req.profile_index],
  );
  if (!profile?.enabled) {
    throw new ApiError('invalid_profile', 'No permissions found for the given profile_index.');
  }
  const isReal = card.real_profile_index === req.profile_index;
  const category = req.category?.trim() ? req.category.trim() : null;
  if (req.task_id !== undefined) {
    await checkTaskForCheckout(tx, {
      botId,
      taskId: req.task_id,
      cardId: card.id,
      profileIndex: req.profile_index,
      amountCents: req.amount_cents,
      merchantName: req.merchant_name,
      merchantUrl: req.merchant_url,
      itemName: req.item_name,
      category,
      at: now,
    });
  }

  // 2–4. Card guardrails, profile allowance, master guardrails (real profile only), in this order.
  const amount = req.amount_cents;
  if (amount > card.per_transaction_cents)
    throw perTransactionError('card_guardrail_violation', card.per_transaction_cents);
  const scope: PurchaseScope = {
    botId,
    ownerId,
    cardId: card.id,
    profileIndex: req.profile_index,
    isReal,
    profileWindow: profile.allowance_window,
  };
  const master = isReal
    ? {
        perTransaction: state.master_per_transaction_cents ?? 0,
        daily: state.master_daily_cents ?? 0,
        monthly: state.master_monthly_cents ?? 0,
      }
    : null;
  let specs = counterSpecs(scope, { card, profile, master });
  const masterPerTransactionFails = master !== null && amount > master.perTransaction;
  // The owner's per-transaction limit sits between the profile allowance and the owner's windows.
  if (masterPerTransactionFails) specs = specs.slice(0, 3);
  const added = await addToCounters(tx, specs, amount, now);
  if (!added.ok) {
    throw limitError(
      added.failed.name,
      added.failed.limitCents ?? 0,
      added.spentCents,
      added.failed.name === 'profile_allowance' ? profile.allowance_window : undefined,
    );
  }
  if (masterPerTransactionFails) throw perTransactionError('master_budget_exceeded', master.perTransaction);

  // 5. Funds. A decoy reads the same balance (so 402 happens alike) but never moves it.
  const wallet = (
    await tx.query<{ available_cents: number }>(
      `SELECT available_cents FROM wallets WHERE bot_id = $1${isReal ? ' FOR UPDATE' : ''}`,
      [botId],
    )
  )[0]!;
  if (wallet.available_cents < amount) {
    throw new ApiError('insufficient_funds', 'The wallet balance is too low for this purchase.', {
      balance_usd: centsToUsd(wallet.available_cents),
      amount_usd: centsToUsd(amount),
    });
  }

  // 6. Approval mode.
  const held = needsApproval(card, profile, amount, category);
  const id = newId('chk');
  const windowMs = ctx.config.approvalWindowSeconds * 1000;
  const expiresAt = held ? now + windowMs : null;
  const decoy = held && !isReal ? decoyDecision(now, windowMs) : null;
  await tx.query(
    `INSERT INTO checkout_confirmations (id, bot_id, owner_id, card_id, profile_index, is_real, profile_window,
       merchant_name, merchant_url, item_name, category, task_id, amount_cents, status, created_at, expires_at,
       decide_at, decoy_outcome, decided_at, decided_by)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20)`,
    [
      id,
      botId,
      ownerId,
      card.id,
      req.profile_index,
      isReal,
      profile.allowance_window,
      req.merchant_name,
      req.merchant_url,
      req.item_name,
      category,
      req.task_id ?? null,
      amount,
      held ? 'pending' : 'approved',
      new Date(now),
      expiresAt === null ? null : new Date(expiresAt),
      decoy ? new Date(decoy.decideAt) : null,
      decoy?.outcome ?? null,
      held ? null : new Date(now),
      held ? null : 'guardrails',
    ],
  );
  if (isReal) {
    if (held) await placeHold(tx, botId, amount, now, id);
    else await debitPurchase(tx, botId, amount, now, id);
    await emitBalanceLowIfCrossed(tx, botId, wallet.available_cents, wallet.available_cents - amount, now);
  }
  if (req.task_id !== undefined) {
    await onCheckoutDecided(tx, {
      botId,
      taskId: req.task_id,
      confirmationId: id,
      status: held ? 'pending' : 'approved',
      at: now,
    });
  }

  const common = {
    confirmation_id: id,
    profile_index: req.profile_index,
    merchant_name: req.merchant_name,
    amount_usd: centsToUsd(amount),
  };
  if (held) {
    return {
      statusCode: 202,
      body: {
        approved: false,
        status: 'pending_confirmation',
        ...common,
        expires_at: iso(expiresAt!),
        message: PENDING_MESSAGE,
      },
    };
  }
  await emitPurchaseEvent(
    tx,
    'purchase.approved',
    { id, botId, amountCents: amount, merchantName: req.merchant_name, itemName: req.item_name },
    now,
  );
  const details = cardDetails(ctx, card, req.profile_index, isReal);
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

/** wallet.balance_low once per crossing below LOW_BALANCE_CENTS. */
export async function emitBalanceLowIfCrossed(
  tx: Queryable,
  botId: string,
  beforeCents: number,
  afterCents: number,
  at: number,
): Promise<void> {
  if (beforeCents >= LOW_BALANCE_CENTS && afterCents < LOW_BALANCE_CENTS) {
    await emitEvent(tx, {
      botId,
      type: 'wallet.balance_low',
      data: {
        balance: centsToUsd(afterCents),
        threshold: centsToUsd(LOW_BALANCE_CENTS),
        description: `Wallet balance fell below $${centsToUsd(LOW_BALANCE_CENTS).toFixed(2)}`,
      },
      at,
    });
  }
}

/** purchase.* events: data per SPEC §6.1 (checkout_id, amount, vendor, description) plus status. No card digits. */
export async function emitPurchaseEvent(
  tx: Queryable,
  type: 'purchase.approved' | 'purchase.denied' | 'purchase.expired',
  c: { id: string; botId: string; amountCents: number; merchantName: string; itemName: string },
  at: number,
): Promise<void> {
  await emitEvent(tx, {
    botId: c.botId,
    type,
    data: {
      checkout_id: c.id,
      amount: centsToUsd(c.amountCents),
      vendor: c.merchantName,
      description: c.itemName,
      status: type.slice('purchase.'.length),
    },
    at,
  });
}
