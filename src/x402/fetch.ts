import type { Static } from '@sinclair/typebox';
import { settleIfDue } from '../spend/holds.ts';
import { sha256Hex } from '../platform/crypto.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne, one } from '../platform/db/port.ts';
import { ApiError, notFound, validationError } from '../platform/errors.ts';
import { microsToUsd } from '../platform/money.ts';
import { consumeRateLimit, tooMany } from '../platform/rateLimit.ts';
import { iso } from '../platform/time.ts';
import {
  type OutboundRequest,
  type OutboundResponse,
  readPaymentRequired,
  resourceTarget,
  sellerOutcome,
  sendOutbound,
} from './outbound.ts';
import { checkRefusal } from './refusal.ts';
import { paymentHeaderName } from './requirements.ts';
import type { FetchAnswer, FetchBody } from './schemas.ts';
import { announceApproved, judgeDomain, pay, paymentStatus, type X402PaymentRow } from './service.ts';
import { loadWallet, requireX402Config } from './wallet.ts';

// POST /api/v1/bot/x402/fetch: the bot hands over the resource request; the service makes it itself
// (src/x402/outbound.ts: the webhook SSRF rules, no redirects followed), pays a 402 answer under
// the guardrails (src/x402/service.ts, with the domain the service connected to and the payee its
// own request was asked for), repeats the request with the signed payment and returns the resource.
// The owner's domain and pay-to lists are so judged on the connection the service made itself.
//
// The seller's answer to the paid request decides what follows: taken (2xx/3xx, or a settlement
// header saying so) → purchase.approved; refused (402 again, or a failed settlement) → the refusal
// check of src/x402/refusal.ts; anything else → the chain will tell (src/x402/reconcile.ts).
// A payment held for the owner answers 202; once approved, the same request with payment_id
// sends it. With an Idempotency-Key the final answer is kept (encrypted, 24 hours, with the
// resource) and a retry gets it again rather than paying twice. That answer stays in
// checkout_idempotency ('x402fetch:<key>'): it holds the fetched resource, which no row can
// rebuild. The payment itself is keyed as any x402 payment ('fetch:<key>', on its x402_payments
// row, looked up by spend_run: src/spend/idempotency.ts).

export const FETCH_PENDING_MESSAGE =
  'Payment held for owner approval. Poll /api/v1/bot/x402/payments/{payment_id}; once it is approved, send the same request again with payment_id to receive the resource.';

type Body = Static<typeof FetchBody>;
type Answer = Static<typeof FetchAnswer>;

const FORBIDDEN_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'expect',
  'proxy-authorization',
  'proxy-connection',
  'payment-signature',
  'x-payment',
]);
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'te', 'trailer']);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/;

function fetchLimit(ctx: AppContext, botId: string, now: number) {
  return { key: `x402fetch:${botId}`, limit: ctx.config.checkoutRateLimitPerHour, windowSeconds: 3600, now };
}

export type FetchResult =
  | { statusCode: 200; body: Answer }
  | { statusCode: 202; body: Record<string, unknown> };

export async function fetchResource(
  ctx: AppContext,
  botId: string,
  body: Body,
  idempotencyKey: string | undefined,
): Promise<FetchResult> {
  requireRail(ctx);
  const url = resourceTarget(ctx, body.url, 'url');
  const request = outboundRequest(url, body);
  const keyRow = idempotencyKey === undefined ? undefined : `x402fetch:${idempotencyKey}`;
  const hash = sha256Hex(JSON.stringify(['x402fetch', body]));
  if (keyRow !== undefined) {
    const replay = await storedAnswer(ctx, botId, keyRow, hash);
    if (replay) return { statusCode: 200, body: replay };
  }
  const now = ctx.clock.now();
  const limited = await ctx.db.transaction((tx) => consumeRateLimit(tx, fetchLimit(ctx, botId, now)));
  if (!limited.ok) throw tooMany(limited.retryAfterSeconds, 'resource requests');

  let answer: Answer;
  if (body.payment_id !== undefined) {
    const held = await heldPayment(ctx, botId, body.payment_id, url);
    if (held.statusCode === 202) return held;
    answer = await deliver(ctx, botId, held.row, request);
  } else {
    // The owner's lists and the rail are checked before the service contacts anyone.
    const wallet = await loadWallet(ctx.db, botId);
    if (!wallet) throw new ApiError('rail_not_active', 'The partner wallet rail is not active for this bot.');
    judgeDomain(wallet, url.hostname.toLowerCase());
    const first = await sendOutbound(ctx, request);
    const required = first.status === 402 ? readPaymentRequired(first) : null;
    if (!required) {
      return {
        statusCode: 200,
        body: {
          paid: false,
          payment: null,
          response: presentResponse(first),
          message:
            first.status === 402
              ? 'The resource answered 402 without x402 payment requirements the service can read; nothing was paid.'
              : 'The resource did not ask for payment; nothing was paid.',
        },
      };
    }
    const description = body.description ?? required.resource?.description;
    const paid = await pay(
      ctx,
      botId,
      {
        resource_url: url.toString(),
        payment_requirements: required.accepts,
        ...(description ? { description: description.slice(0, 500) } : {}),
      },
      idempotencyKey === undefined ? undefined : `fetch:${idempotencyKey}`,
      { domainCheck: 'connected' },
    );
    if (paid.replayed) {
      throw new ApiError(
        'idempotency_conflict',
        `A request with this Idempotency-Key already paid ${String(paid.body.payment_id)} and has not finished (or was interrupted): poll GET /api/v1/bot/x402/payments/${String(paid.body.payment_id)}.`,
        { payment_id: paid.body.payment_id },
      );
    }
    if (paid.statusCode === 202) {
      return { statusCode: 202, body: { ...paid.body, message: FETCH_PENDING_MESSAGE } };
    }
    const row = await one<X402PaymentRow>(ctx.db, 'SELECT * FROM x402_payments WHERE id = $1', [
      paid.body.payment_id,
    ]);
    answer = await deliver(ctx, botId, row, request);
  }
  if (keyRow !== undefined) await storeAnswer(ctx, botId, keyRow, hash, answer);
  return { statusCode: 200, body: answer };
}

function requireRail(ctx: AppContext) {
  if (!ctx.config.x402) {
    throw new ApiError('rail_not_active', 'The partner wallet rail is not available on this service.');
  }
  return requireX402Config(ctx);
}

function outboundRequest(url: URL, body: Body): OutboundRequest {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(body.headers ?? {})) {
    const lower = name.toLowerCase();
    if (!TOKEN.test(name) || FORBIDDEN_HEADERS.has(lower) || lower.startsWith('proxy-')) {
      throw validationError(`headers.${name.slice(0, 100)} cannot be sent through the service.`, {
        field: 'headers',
      });
    }
    if (/[\r\n\0]/.test(value)) {
      throw validationError(`headers.${name} must not contain line breaks.`, { field: 'headers' });
    }
    headers[lower] = value;
  }
  if (body.body !== undefined && body.body_base64 !== undefined) {
    throw validationError('Send body or body_base64, not both.', { field: 'body_base64' });
  }
  const method = body.method ?? 'GET';
  const payload =
    body.body !== undefined
      ? Buffer.from(body.body, 'utf8')
      : body.body_base64 !== undefined
        ? Buffer.from(body.body_base64, 'base64')
        : undefined;
  if (payload && method === 'GET') {
    throw validationError('A GET request has no body: use POST, PUT or PATCH.', { field: 'method' });
  }
  return { url, method, headers, body: payload };
}

/** A held payment named by payment_id: still pending (202 again), or approved and ready to send. */
async function heldPayment(
  ctx: AppContext,
  botId: string,
  paymentId: string,
  url: URL,
): Promise<{ statusCode: 202; body: Record<string, unknown> } | { statusCode: 200; row: X402PaymentRow }> {
  const row = await maybeOne<X402PaymentRow>(
    ctx.db,
    'SELECT * FROM x402_payments WHERE id = $1 AND bot_id = $2',
    [paymentId, botId],
  );
  if (!row) throw notFound('Payment');
  if (row.resource_url !== url.toString()) {
    throw validationError(`payment_id ${paymentId} pays ${row.resource_url}, not this url.`, {
      field: 'payment_id',
    });
  }
  if (row.domain_check !== 'connected') {
    throw validationError(`payment_id ${paymentId} was not made through POST /api/v1/bot/x402/fetch.`, {
      field: 'payment_id',
    });
  }
  if (row.status === 'pending') {
    const poll = await paymentStatus(ctx, botId, paymentId, (id) => settleIfDue(ctx, id));
    if (poll.payment_status === 'pending') {
      return {
        statusCode: 202,
        body: {
          approved: false,
          status: 'pending_confirmation',
          payment_id: row.id,
          confirmation_id: row.id,
          amount_usd: microsToUsd(Number(row.amount_micros)),
          amount_atomic: String(row.amount_micro),
          network: row.network,
          asset: row.asset,
          pay_to: row.pay_to,
          resource_url: row.resource_url,
          x402_version: row.x402_version === 1 ? 1 : 2,
          expires_at: poll.expires_at ?? iso(ctx.clock.now()),
          message: FETCH_PENDING_MESSAGE,
        },
      };
    }
    return heldPayment(ctx, botId, paymentId, url);
  }
  if (row.status !== 'authorized') {
    throw validationError(`payment_id ${paymentId} is ${row.status}: there is no payment to send.`, {
      field: 'payment_id',
      payment_status: row.status,
    });
  }
  return { statusCode: 200, row };
}

/** Sends the request with the signed payment and records what the seller's answer says. */
async function deliver(
  ctx: AppContext,
  botId: string,
  row: X402PaymentRow,
  request: OutboundRequest,
): Promise<Answer> {
  const poll = await paymentStatus(ctx, botId, row.id, async () => {});
  if (!poll.payment_header) {
    throw validationError(`payment_id ${row.id} carries no signed payment.`, { field: 'payment_id' });
  }
  const headers = {
    ...request.headers,
    [paymentHeaderName(row.x402_version).toLowerCase()]: poll.payment_header,
  };
  let second: OutboundResponse;
  try {
    second = await sendOutbound(ctx, { ...request, headers });
  } catch (error) {
    if (error instanceof ApiError) {
      throw new ApiError(
        error.code,
        `${error.message} The payment ${row.id} stays reserved until the chain shows it used or it lapses (${poll.valid_before ?? 'soon'}).`,
        { ...error.details, payment_id: row.id },
      );
    }
    throw error;
  }
  const { outcome, reason } = sellerOutcome(second);
  let message: string;
  let current: X402PaymentRow = row;
  if (outcome === 'accepted') {
    await ctx.db.transaction(async (tx) => {
      const locked = await one<X402PaymentRow>(tx, 'SELECT * FROM x402_payments WHERE id = $1', [row.id]);
      if (locked.status === 'authorized' || locked.status === 'settled')
        await announceApproved(tx, locked, ctx.clock.now());
    });
    message = 'Paid: the seller took the payment and answered.';
  } else if (outcome === 'refused') {
    const checked = await checkRefusal(ctx, botId, row.id, reason);
    current = checked.row;
    message = checked.released
      ? `The seller refused the payment (${reason}) and it can never be used (${checked.reason}): it was not paid, and its amount is back in the wallet.`
      : `The seller refused the payment (${reason}), but the authorisation could still be used until ${poll.valid_before}: its amount comes back then unless the seller uses it.`;
  } else {
    message = `The seller answered HTTP ${second.status}; whether it took the payment will show on chain.`;
  }
  const latest =
    (await maybeOne<X402PaymentRow>(ctx.db, 'SELECT * FROM x402_payments WHERE id = $1', [row.id])) ??
    current;
  return {
    paid: outcome === 'accepted',
    payment: presentFetchPayment(latest),
    response: presentResponse(second),
    message,
  };
}

function presentFetchPayment(p: X402PaymentRow): Answer['payment'] {
  return {
    payment_id: p.id,
    payment_status: p.status,
    amount_usd: microsToUsd(Number(p.amount_micros)),
    amount_atomic: String(p.amount_micro),
    pay_to: p.pay_to,
    network: p.network,
    x402_version: p.x402_version === 1 ? 1 : 2,
    tx_hash: p.tx_hash,
    refusal_reason: p.refusal_reason,
    valid_before: p.valid_before === null ? null : iso(Number(p.valid_before) * 1000),
  };
}

const TEXTUAL = /^(text\/|application\/(json|xml|javascript|x-www-form-urlencoded)\b|[^;]*\+(json|xml)\b)/i;

function presentResponse(res: OutboundResponse): Answer['response'] {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(res.headers)) {
    if (!HOP_BY_HOP.has(name)) headers[name] = value;
  }
  const type = res.headers['content-type'] ?? '';
  let text: string | undefined;
  if (res.body.length === 0 || TEXTUAL.test(type)) {
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(res.body);
    } catch {
      text = undefined;
    }
  }
  return {
    status: res.status,
    headers,
    ...(text === undefined ? { body_base64: res.body.toString('base64') } : { body_text: text }),
    truncated: res.truncated,
  };
}

async function storedAnswer(
  ctx: AppContext,
  botId: string,
  key: string,
  hash: string,
): Promise<Answer | null> {
  const row = await maybeOne<{ request_hash: string; response_enc: string | null; created_at: Date }>(
    ctx.db,
    'SELECT request_hash, response_enc, created_at FROM checkout_idempotency WHERE bot_id = $1 AND key = $2',
    [botId, key],
  );
  if (!row || row.response_enc === null) return null;
  if (new Date(row.created_at).getTime() <= ctx.clock.now() - 24 * 3600_000) return null;
  if (row.request_hash !== hash) {
    throw new ApiError(
      'idempotency_conflict',
      'This Idempotency-Key was already used with a different request body.',
    );
  }
  return JSON.parse(ctx.secrets.decrypt(row.response_enc)) as Answer;
}

async function storeAnswer(ctx: AppContext, botId: string, key: string, hash: string, answer: Answer) {
  await ctx.db.query(
    `INSERT INTO checkout_idempotency (bot_id, key, request_hash, created_at, status_code, response_enc)
     VALUES ($1, $2, $3, $4, 200, $5)
     ON CONFLICT (bot_id, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, created_at = EXCLUDED.created_at,
       status_code = 200, response_enc = EXCLUDED.response_enc`,
    [botId, key, hash, new Date(ctx.clock.now()), ctx.secrets.encrypt(JSON.stringify(answer))],
  );
}
