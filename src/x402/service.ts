import type { Static } from '@sinclair/typebox';
import type { PaymentPayload, ResourceInfo } from '@x402/core/types';
import { sendOwnerMailSoon } from '../notifications/job.ts';
import type { AppContext } from '../platform/context.ts';
import { sha256Hex } from '../platform/crypto.ts';
import { maybeOne, one, type Queryable } from '../platform/db/port.ts';
import { ApiError, notFound } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { microsToUsd } from '../platform/money.ts';
import { present } from '../platform/present.ts';
import { consumeRateLimit } from '../platform/rateLimit.ts';
import { iso } from '../platform/time.ts';
import { subtractFromCounters } from '../spend/counters.ts';
import { emitPurchaseEvent } from '../spend/events.ts';
import type { ConfirmationRow } from '../spend/holds.ts';
import { IDEMPOTENCY_TTL_MS, legacyReplay } from '../spend/idempotency.ts';
import { refusalError } from '../spend/refusals.ts';
import type { SpendResult } from '../spend/result.ts';
import { reader, sharedRefusal, spendInTransaction } from '../spend/run.ts';
import { x402Moves } from '../wallet/ledger.ts';
import { probeClaim } from './probe.ts';
import {
  type CheckedRequirement,
  chooseRequirement,
  domainMatches,
  paymentHeaderName,
  resourceDomain,
} from './requirements.ts';
import type { PaymentPoll } from './schemas.ts';
import type { PaymentPayloadV1, StoredRequirement } from './sign.ts';
import { loadWallet, requireX402Config, type X402WalletRow } from './wallet.ts';

// POST /api/v1/bot/x402/pay: the one guardrail chain of both rails, spend_run
// (src/migrations/functions/spend_run.sql, called through src/spend/run.ts) with the payment method
// 'partner_wallet', in one transaction: idempotency → rate limit → wallet status → rail status,
// network and asset → pay-to and domain lists → the rail's per-transaction / daily / monthly limits
// → the owner's master guardrails (the same 'owner:<id>' counters card purchases count in, so one
// budget covers both rails) → the bot's figures → funds (the x402 wallet row, locked last) →
// approval mode → the x402_payments row, the ledger move, and when held a checkout confirmation
// with rail partner_wallet (the same inbox, mail, approve / deny / expire paths and purchase.*
// events as a card purchase: the one hold life in src/spend/holds.ts calls settleX402Hold).
// What needs TypeScript stays here: choosing the requirement, judging the domain against the
// owner's domain lists (passed to the call as its verdict) and, approved at once, signing the
// authorisation after the call in the same transaction.
//
// Counter locks in one order: 'x402:<bot>' → 'owner:<id>' → 'bot:<id>', then the x402 wallet row.
//
// The resource's domain. Pay-to lists bind in every mode: payTo is what the service signs. The
// domain lists bind only a domain the service knows (domain_check): 'connected' when the service
// makes the request itself (POST /api/v1/bot/x402/fetch, src/x402/fetch.ts); 'probed' in this
// sign-only mode when the owner keeps domain lists: the named domain must pass them, and the
// service then fetches the named resource itself (src/x402/probe.ts) and pays only when that
// answer asks for exactly this payment (network, asset, payTo, amount). So a bot cannot name an
// allowed host while handing over another seller's requirements. Without domain lists nothing is
// judged on the domain and it is only recorded ('claimed').
//
// purchase.approved: a payment approved at once is announced when the seller is known to have
// taken it (the seller's answer to the service's own request, or the chain: reconcile.ts), so a
// payment the seller refuses never announces it (src/x402/refusal.ts sends x402.refused); a held
// payment announces it at the owner's approval (src/spend/holds.ts).

export interface PayRequest {
  resource_url: string;
  payment_requirements: unknown;
  resource?: { description?: string; mimeType?: string } | undefined;
  description?: string | undefined;
}

export interface X402PaymentRow {
  id: string;
  bot_id: string;
  owner_id: string;
  resource_url: string;
  resource_domain: string;
  description: string | null;
  network: string;
  asset: string;
  pay_from: string;
  pay_to: string;
  amount_micro: string;
  amount_micros: number;
  requirements: unknown;
  status: 'pending' | 'denied' | 'expired' | 'authorized' | 'settled' | 'lapsed' | 'refused';
  x402_version: number;
  domain_check: 'claimed' | 'probed' | 'connected';
  announced_at: Date | null;
  refusal_reason: string | null;
  nonce: string | null;
  valid_before: number | null;
  payload_enc: string | null;
  tx_hash: string | null;
  created_at: Date;
  authorized_at: Date | null;
  finished_at: Date | null;
  [key: string]: unknown;
}

export const X402_APPROVED_MESSAGE =
  'Payment authorised. Retry the resource request with the header named payment_header_name (PAYMENT-SIGNATURE, or X-PAYMENT for an x402 v1 seller) set to payment_header, before valid_before.';
export const X402_PENDING_MESSAGE =
  'Payment held for owner approval. Poll /api/v1/bot/x402/payments/{payment_id} until it is decided or expires.';

function payLimit(ctx: AppContext, botId: string, now: number) {
  return { key: `x402:${botId}`, limit: ctx.config.checkoutRateLimitPerHour, windowSeconds: 3600, now };
}

function requestHash(req: PayRequest): string {
  return sha256Hex(
    JSON.stringify([
      'x402',
      req.resource_url,
      req.payment_requirements,
      req.resource ?? null,
      req.description ?? null,
    ]),
  );
}

/** How the resource's domain is known to the caller of pay(): named by the bot, or connected to by the service. */
export interface PayOptions {
  domainCheck: 'claimed' | 'connected';
}

export type PayResult = SpendResult & { replayed: boolean };

export async function pay(
  ctx: AppContext,
  botId: string,
  req: PayRequest,
  idempotencyKey: string | undefined,
  options: PayOptions = { domainCheck: 'claimed' },
): Promise<PayResult> {
  const cfg = ctx.config.x402;
  if (!cfg) {
    throw new ApiError('rail_not_active', 'The partner wallet rail is not available on this service.');
  }
  // Everything about the request itself is checked before any row is touched (400, nothing signed).
  const domain = resourceDomain(req.resource_url);
  const offered = Array.isArray(req.payment_requirements)
    ? req.payment_requirements
    : [req.payment_requirements];
  const chosen = await chooseRequirement(cfg, offered);
  const now = ctx.clock.now();
  const key = idempotencyKey === undefined ? undefined : `x402:${idempotencyKey}`;
  const hash = key === undefined ? '' : requestHash(req);
  let result: PayResult;
  try {
    let domainCheck: X402PaymentRow['domain_check'] = options.domainCheck;
    if (domainCheck === 'claimed' && (await needsProbe(ctx, botId, domain, key))) {
      // Network I/O, so before the transaction: the named resource must ask for this payment.
      await probeClaim(ctx, req.resource_url, chosen);
      domainCheck = 'probed';
    }
    result = await ctx.db.transaction(async (tx) => {
      if (key !== undefined) {
        // A key used before migration 0051 is answered from its stored response.
        const replay = await legacyReplay(ctx, tx, botId, key, hash, now);
        if (replay) return { ...replay, replayed: true };
      }
      return runChain(ctx, tx, botId, req, chosen, domain, domainCheck, now, key ?? null, hash);
    });
  } catch (error) {
    // As for checkouts: a refused payment still counts toward the hourly limit.
    if (error instanceof ApiError && error.code !== 'rate_limited' && error.status < 500) {
      await ctx.db
        .transaction((tx) => consumeRateLimit(tx, payLimit(ctx, botId, now)))
        .catch((err) => ctx.logger.warn({ err }, 'could not count a refused x402 payment'));
    }
    throw error;
  }
  if (!result.replayed && result.heldForOwner) {
    sendOwnerMailSoon(ctx);
  }
  return { statusCode: result.statusCode, body: result.body, replayed: result.replayed };
}

/**
 * Sign mode: whether the owner's domain lists apply (then the named domain must pass them first,
 * refused here without contacting anyone) and the claim is still to be checked: not for a retry
 * whose first answer is stored, which is replayed as it was.
 */
async function needsProbe(ctx: AppContext, botId: string, domain: string, key: string | undefined) {
  const wallet = await loadWallet(ctx.db, botId);
  if (!wallet || (wallet.allow_domains.length === 0 && wallet.deny_domains.length === 0)) return false;
  judgeDomain(wallet, domain);
  if (key !== undefined) {
    // A payment of this key under 24 hours old (or its stored answer from before migration 0051).
    const stored = await maybeOne(
      ctx.db,
      `SELECT 1 FROM x402_payments WHERE bot_id = $1 AND idempotency_key = $2 AND created_at > $3
       UNION ALL
       SELECT 1 FROM checkout_idempotency WHERE bot_id = $1 AND key = $2 AND response_enc IS NOT NULL AND created_at > $3
       LIMIT 1`,
      [botId, key, new Date(ctx.clock.now() - IDEMPOTENCY_TTL_MS)],
    );
    if (stored) return false;
  }
  return true;
}

/** The owner's domain lists against a host: 403 destination_not_allowed when they exclude it. */
export function judgeDomain(wallet: Pick<X402WalletRow, 'allow_domains' | 'deny_domains'>, domain: string) {
  if (domainRefused(wallet, domain)) throw listRefusal(domain);
}

/** Whether the owner's domain lists exclude a host (the one matching of a host against them: domainMatches). */
function domainRefused(
  wallet: Pick<X402WalletRow, 'allow_domains' | 'deny_domains'>,
  domain: string,
): boolean {
  if (wallet.deny_domains.some((d) => domainMatches(domain, d))) return true;
  return wallet.allow_domains.length > 0 && !wallet.allow_domains.some((d) => domainMatches(domain, d));
}

/** The counters an x402 payment counts in, in lock order (released on deny / expiry). */
export function x402CounterSpecs(botId: string, ownerId: string) {
  return [
    { scope: `x402:${botId}`, kind: 'day' as const },
    { scope: `x402:${botId}`, kind: 'month' as const },
    { scope: `owner:${ownerId}`, kind: 'day' as const },
    { scope: `owner:${ownerId}`, kind: 'month' as const },
    { scope: `bot:${botId}`, kind: 'month' as const },
  ];
}

function listRefusal(what: string): ApiError {
  return new ApiError('destination_not_allowed', `The owner does not allow payments to ${what}.`);
}

/** A refusal of spend_run for an x402 payment, as the spec's error: the partner wallet's own here, the shared ones in src/spend/refusals.ts. */
function paymentRefusalError(r: Record<string, unknown>): ApiError {
  const { str } = reader(r);
  switch (r.error) {
    case 'rail_not_active':
      return new ApiError('rail_not_active', 'The partner wallet rail is not active for this bot.');
    case 'rail_network':
      return new ApiError(
        'rail_not_active',
        `The partner wallet is on ${str(r.network)}, not ${str(r.configured)}.`,
      );
    case 'destination_not_allowed':
      return listRefusal(str(r.destination));
    case 'destination_lists_changed':
      // The lists were set after needsProbe read them: the named domain was not checked.
      return new ApiError(
        'destination_not_allowed',
        "The owner's domain lists changed while this payment was checked: ask again.",
      );
  }
  const shared = sharedRefusal(r);
  if (!shared) throw new Error(`unexpected spend_run refusal ${JSON.stringify(r)}`);
  return refusalError('partner_wallet', shared);
}

/**
 * The guardrail chain for the partner wallet: spend_run with the method 'partner_wallet' (the same
 * function and steps as a card purchase), then, approved at once, the signature in the same
 * transaction.
 */
async function runChain(
  ctx: AppContext,
  tx: Queryable,
  botId: string,
  req: PayRequest,
  chosen: CheckedRequirement,
  domain: string,
  domainCheck: X402PaymentRow['domain_check'],
  now: number,
  idempotencyKey: string | null,
  hash: string,
): Promise<PayResult> {
  const cfg = requireX402Config(ctx);
  // The domain lists as this transaction reads them, judged here (domainMatches); spend_run raises
  // the verdict at its place in the chain, after the rail's state and the pay-to lists.
  const lists = await loadWallet(tx, botId);
  const amount = chosen.amountMicros;
  const id = newId('chk');
  const description = req.description ?? req.resource?.description ?? null;
  const resource: ResourceInfo = {
    url: req.resource_url,
    ...(description ? { description } : {}),
    ...(req.resource?.mimeType ? { mimeType: req.resource.mimeType } : {}),
  };
  const stored: StoredRequirement = {
    requirements: chosen.requirements,
    offered: chosen.offered,
    x402Version: chosen.x402Version,
    resource,
  };
  const limit = payLimit(ctx, botId, now);
  const answer = await spendInTransaction(tx, {
    botId,
    method: {
      kind: 'partner_wallet',
      payment: {
        network: cfg.network,
        asset: chosen.requirements.asset,
        pay_to: chosen.payTo,
        resource_url: req.resource_url,
        resource_domain: domain,
        description,
        amount_micro: chosen.amountMicro.toString(),
        requirements: stored,
        x402_version: chosen.x402Version,
        domain_check: domainCheck,
      },
      domainRefused: lists !== null && domainRefused(lists, domain),
    },
    amountMicros: amount,
    category: 'x402',
    confirmationId: id,
    merchantName: domain,
    merchantUrl: req.resource_url,
    itemName: description ?? `x402 payment to ${chosen.payTo}`,
    taskId: null,
    now,
    approvalWindowSeconds: ctx.config.approvalWindowSeconds,
    ledgerTransactionId: newId('ltx'),
    eventId: null,
    eventBody: null,
    rateKey: limit.key,
    rateLimit: limit.limit,
    idempotencyKey,
    requestHash: idempotencyKey === null ? null : hash,
  });
  if (answer.refused) throw paymentRefusalError(answer.r);
  const { bool, str, obj } = reader(answer.r);
  if (answer.r.replay !== undefined) {
    return { ...(await replayAnswer(ctx, tx, str(obj(answer.r.replay).payment_id))), replayed: true };
  }
  const common = {
    payment_id: id,
    confirmation_id: id,
    amount_usd: microsToUsd(amount),
    amount_atomic: chosen.requirements.amount,
    network: chosen.requirements.network,
    asset: chosen.requirements.asset,
    pay_to: chosen.payTo,
    resource_url: req.resource_url,
    x402_version: chosen.x402Version,
  };
  if (bool(answer.r.held)) {
    // spend_run wrote the payment (pending), its confirmation (rail partner_wallet) and the hold.
    const expiresAt = now + ctx.config.approvalWindowSeconds * 1000;
    return { ...heldAnswer(common, expiresAt), heldForOwner: id, replayed: false };
  }
  // spend_run wrote the payment and moved the amount to x402_authorized; the signature goes on the
  // payment row in the same transaction. purchase.approved waits until the seller took the payment
  // (announceApproved).
  const signed = await authorise(ctx, tx, str(answer.r.key_enc), stored, id, now);
  return { ...approvedAnswer(common, signed), replayed: false };
}

/** What every answer about one payment says of it (the first answer and its replays alike). */
type PaymentCommon = Record<string, unknown>;

function heldAnswer(common: PaymentCommon, expiresAt: number | Date): SpendResult {
  return {
    statusCode: 202,
    body: {
      approved: false,
      status: 'pending_confirmation',
      ...common,
      expires_at: iso(expiresAt),
      message: X402_PENDING_MESSAGE,
    },
  };
}

function approvedAnswer(common: PaymentCommon, signed: Parameters<typeof signedFields>[0]): SpendResult {
  return {
    statusCode: 200,
    body: {
      approved: true,
      status: 'approved',
      ...common,
      ...signedFields(signed),
      message: X402_APPROVED_MESSAGE,
    },
  };
}

/**
 * The first answer of an Idempotency-Key, again, rebuilt from its payment row exactly as it was
 * built then: a held payment answers its 202 with its expiry whatever was decided since; one
 * approved at once its signed authorisation (kept encrypted on the row, payload_enc).
 */
async function replayAnswer(ctx: AppContext, tx: Queryable, id: string): Promise<SpendResult> {
  const row = await one<X402PaymentRow & { expires_at: Date | null }>(
    tx,
    `SELECT p.*, c.expires_at FROM x402_payments p LEFT JOIN checkout_confirmations c ON c.id = p.id
      WHERE p.id = $1`,
    [id],
  );
  const stored = storedRequirement(row);
  const common = {
    payment_id: row.id,
    confirmation_id: row.id,
    amount_usd: microsToUsd(Number(row.amount_micros)),
    amount_atomic: stored.requirements.amount,
    network: stored.requirements.network,
    asset: stored.requirements.asset,
    pay_to: row.pay_to,
    resource_url: row.resource_url,
    x402_version: Number(row.x402_version),
  };
  if (row.expires_at !== null) return heldAnswer(common, row.expires_at);
  if (!row.payload_enc) throw new Error(`x402 payment ${row.id} approved at once has no signature`);
  const payload = JSON.parse(ctx.secrets.decrypt(row.payload_enc)) as PaymentPayload | PaymentPayloadV1;
  const { encodePaymentSignatureHeader } = await import('@x402/core/http');
  return approvedAnswer(common, {
    payload,
    header: encodePaymentSignatureHeader(payload as PaymentPayload),
    validBefore: Number(row.valid_before),
  });
}

function signedFields(s: {
  payload: PaymentPayload | PaymentPayloadV1;
  header: string;
  validBefore: number;
}) {
  return {
    valid_before: iso(s.validBefore * 1000),
    payment_header_name: paymentHeaderName(s.payload.x402Version),
    payment_header: s.header,
    payment_payload: s.payload,
  };
}

/** Signs the payment's authorisation and records it (status authorized, nonce, validity, payload encrypted). */
async function authorise(
  ctx: AppContext,
  tx: Queryable,
  keyEnc: string,
  stored: StoredRequirement,
  id: string,
  now: number,
) {
  // The x402 and viem libraries load on the first payment (./evm.ts).
  const sign = await import('./sign.ts');
  const signed = await sign.signPayment(ctx, keyEnc, stored);
  await tx.query(
    `UPDATE x402_payments SET status = 'authorized', nonce = $2, valid_before = $3, payload_enc = $4, authorized_at = $5
      WHERE id = $1`,
    [
      id,
      signed.nonce,
      signed.validBefore,
      ctx.secrets.encrypt(JSON.stringify(signed.payload)),
      new Date(now),
    ],
  );
  return signed;
}

export function storedRequirement(row: X402PaymentRow): StoredRequirement {
  return (
    typeof row.requirements === 'string' ? JSON.parse(row.requirements) : row.requirements
  ) as StoredRequirement;
}

/**
 * Sends purchase.approved for a payment approved at once, when the seller is known to have taken
 * it (its answer to the service's request, or the chain), once: announced_at is set with it.
 */
export async function announceApproved(tx: Queryable, row: X402PaymentRow, now: number): Promise<void> {
  const claimed = await tx.query(
    'UPDATE x402_payments SET announced_at = $2 WHERE id = $1 AND announced_at IS NULL RETURNING 1 AS ok',
    [row.id, new Date(now)],
  );
  if (claimed.length === 0) return;
  await emitPurchaseEvent(
    tx,
    'purchase.approved',
    {
      id: row.id,
      botId: row.bot_id,
      amountMicros: Number(row.amount_micros),
      merchantName: row.resource_domain,
      itemName: row.description ?? `x402 payment to ${row.pay_to}`,
    },
    now,
  );
}

/**
 * The partner wallet's part of settling a held payment (src/spend/holds.ts), inside its
 * transaction with the confirmation row locked: approve signs now (fresh validity) and moves the
 * hold to x402_authorized; deny / expire give the counters and the hold back.
 */
export async function settleX402Hold(
  ctx: AppContext | undefined,
  tx: Queryable,
  c: ConfirmationRow,
  outcome: 'approved' | 'denied' | 'expired',
  now: number,
): Promise<void> {
  const heldAt = new Date(c.created_at).getTime();
  if (outcome === 'approved') {
    if (!ctx) throw new Error('an x402 approval needs the context to sign');
    const wallet = present(await loadWallet(tx, c.bot_id, true), 'the partner wallet row');
    const row = await one<X402PaymentRow>(tx, 'SELECT * FROM x402_payments WHERE id = $1', [c.id]);
    await authorise(ctx, tx, wallet.key_enc, storedRequirement(row), c.id, now);
    await x402Moves.approve(tx, c.bot_id, c.amount_micros, now, c.id);
    // src/spend/holds.ts sends purchase.approved for the owner's approval.
    await tx.query('UPDATE x402_payments SET announced_at = $2 WHERE id = $1', [c.id, new Date(now)]);
    return;
  }
  await subtractFromCounters(tx, x402CounterSpecs(c.bot_id, c.owner_id), c.amount_micros, heldAt);
  await x402Moves.release(tx, c.bot_id, c.amount_micros, now, c.id);
  await tx.query(
    `UPDATE x402_payments SET status = $2, finished_at = $3 WHERE id = $1 AND status = 'pending'`,
    [c.id, outcome, new Date(now)],
  );
}

const POLL_MESSAGES: Record<X402PaymentRow['status'], string> = {
  pending: 'Waiting for the owner to approve or deny the payment.',
  authorized: X402_APPROVED_MESSAGE,
  settled: 'The payment was settled on chain.',
  lapsed: 'The authorisation expired unused; its amount is back in the wallet. Ask again to pay.',
  denied: 'The owner denied this payment.',
  expired: 'The owner did not decide in time; the payment expired.',
  refused:
    'The seller refused the payment and it can never be used on chain: it was not paid, and its amount is back in the wallet.',
};

/** GET /api/v1/bot/x402/payments/{id}: the same states as a checkout poll, plus the on-chain outcome. */
export async function paymentStatus(
  ctx: AppContext,
  botId: string,
  id: string,
  settleDue: (id: string) => Promise<void>,
) {
  let p = await maybeOne<X402PaymentRow>(
    ctx.db,
    'SELECT * FROM x402_payments WHERE id = $1 AND bot_id = $2',
    [id, botId],
  );
  if (!p) throw notFound('Payment');
  if (p.status === 'pending') {
    await settleDue(id);
    p = await one<X402PaymentRow>(ctx.db, 'SELECT * FROM x402_payments WHERE id = $1', [id]);
  }
  const status =
    p.status === 'authorized' || p.status === 'settled' || p.status === 'lapsed' || p.status === 'refused'
      ? 'approved'
      : (p.status as 'pending' | 'denied' | 'expired');
  const body: Static<typeof PaymentPoll> = {
    payment_id: p.id,
    confirmation_id: p.id,
    status,
    payment_status: p.status,
    amount_usd: microsToUsd(Number(p.amount_micros)),
    amount_atomic: String(p.amount_micro),
    pay_to: p.pay_to,
    resource_url: p.resource_url,
    tx_hash: p.tx_hash,
    x402_version: p.x402_version === 1 ? (1 as const) : (2 as const),
    message: POLL_MESSAGES[p.status],
  };
  if (p.refusal_reason) body.refusal_reason = p.refusal_reason;
  if (p.status === 'pending') {
    const c = await maybeOne<{ expires_at: Date }>(
      ctx.db,
      'SELECT expires_at FROM checkout_confirmations WHERE id = $1',
      [id],
    );
    if (c) body.expires_at = iso(c.expires_at);
  }
  if (p.status === 'authorized' && p.payload_enc) {
    const payload = JSON.parse(ctx.secrets.decrypt(p.payload_enc)) as PaymentPayload | PaymentPayloadV1;
    const { encodePaymentSignatureHeader } = await import('@x402/core/http');
    Object.assign(
      body,
      signedFields({
        payload,
        header: encodePaymentSignatureHeader(payload as PaymentPayload),
        validBefore: Number(p.valid_before),
      }),
    );
  }
  return body;
}

export function presentPayment(p: X402PaymentRow) {
  return {
    payment_id: p.id,
    status: p.status,
    amount_usd: microsToUsd(Number(p.amount_micros)),
    amount_atomic: String(p.amount_micro),
    pay_to: p.pay_to,
    resource_url: p.resource_url,
    description: p.description,
    network: p.network,
    x402_version: p.x402_version === 1 ? (1 as const) : (2 as const),
    domain_check: p.domain_check,
    refusal_reason: p.refusal_reason,
    tx_hash: p.tx_hash,
    valid_before: p.valid_before === null ? null : iso(Number(p.valid_before) * 1000),
    created_at: iso(p.created_at),
    finished_at: p.finished_at ? iso(p.finished_at) : null,
  };
}
