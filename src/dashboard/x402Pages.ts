import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import type { App } from '../platform/http.ts';
import { getX402Wallet, listX402Payments, updateX402Settings } from '../x402/owner.ts';
import { reconcileWallet } from '../x402/reconcile.ts';
import { setPartnerRail } from '../x402/wallet.ts';
import { parseUsdToCents, tags } from './forms.ts';
import { html, type SafeHtml } from './html.ts';
import { sessionOf } from './http.ts';
import { BotParams, CsrfForm, X402ImportBody, X402SettingsBody } from './schemas.ts';
import type { PartnerWalletData } from './views/x402.ts';

// The partner wallet's forms on the bot page (the section is drawn by src/dashboard/views/x402.ts):
// turn it on or off, import a key, read the balance, change settings. Every action goes through
// src/x402/ (ownership, audit log, events) and redirects back.

type BotPageFn = (
  request: FastifyRequest,
  reply: FastifyReply,
  botId: string,
  options: { status?: number; top?: SafeHtml | string },
) => Promise<unknown>;

/** What the partner wallet section shows: nothing without X402_NETWORK, else the wallet if any. */
export async function partnerWalletData(
  ctx: AppContext,
  ownerId: string,
  botId: string,
): Promise<PartnerWalletData> {
  if (!ctx.config.x402) return { configured: false };
  let wallet: Awaited<ReturnType<typeof getX402Wallet>> | undefined;
  try {
    wallet = await getX402Wallet(ctx, ownerId, botId);
  } catch (error) {
    if (!(error instanceof ApiError && error.code === 'not_found')) throw error;
  }
  if (!wallet) return { configured: true, wallet: undefined };
  // qrcode is loaded with the first wallet page, not at start.
  const { default: QRCode } = await import('qrcode');
  const qrSvg = await QRCode.toString(wallet.address, { type: 'svg', margin: 1, width: 160 });
  const { payments } = await listX402Payments(ctx, ownerId, botId, 10);
  return { configured: true, wallet, qrSvg, payments };
}

/**
 * The entries of a list textarea: one per line (commas separate too). Spaces do not: "not a
 * domain" is one entry, refused as such, never three domains "not", "a" and "domain".
 */
export function lines(text: string | undefined): string[] | undefined {
  if (text === undefined) return undefined;
  return text
    .split(/[\r\n,]+/)
    .map((x) => x.trim())
    .filter(Boolean);
}

export function registerX402Pages(app: App, ctx: AppContext, botPage: BotPageFn): void {
  const fail = (request: FastifyRequest, reply: FastifyReply, botId: string, error: unknown) => {
    if (error instanceof ApiError && error.status < 500 && error.status !== 404) {
      return botPage(request, reply, botId, {
        status: error.status,
        top: html`<div class="flash bad" role="alert">${error.message}</div>`,
      });
    }
    throw error;
  };

  app.post(
    '/bots/:bot_id/x402/import',
    {
      schema: {
        tags,
        summary: 'Import a private key for the partner wallet and turn it on',
        params: BotParams,
        body: X402ImportBody,
      },
    },
    async (request, reply) => {
      const botId = request.params.bot_id;
      try {
        await setPartnerRail(
          ctx,
          sessionOf(request).ownerId,
          botId,
          'active',
          request.body.private_key ?? '',
        );
      } catch (error) {
        return fail(request, reply, botId, error);
      }
      return reply.redirect(`/bots/${botId}?notice=x402_on#rails-h`, 303);
    },
  );

  app.post(
    '/bots/:bot_id/x402/refresh',
    {
      schema: {
        tags,
        summary: 'Read the partner wallet balance from the chain',
        params: BotParams,
        body: CsrfForm,
      },
    },
    async (request, reply) => {
      const botId = request.params.bot_id;
      await getX402Wallet(ctx, sessionOf(request).ownerId, botId);
      try {
        await reconcileWallet(ctx, botId);
      } catch (err) {
        ctx.logger.warn({ err }, 'could not read the partner wallet from the chain');
        return botPage(request, reply, botId, {
          status: 502,
          top: html`<div class="flash bad" role="alert">The chain could not be read (X402_RPC_URL). Try again later.</div>`,
        });
      }
      return reply.redirect(`/bots/${botId}?notice=x402_refreshed#rails-h`, 303);
    },
  );

  app.post(
    '/bots/:bot_id/x402/settings',
    {
      schema: {
        tags,
        summary: 'Partner wallet limits, approval mode and lists',
        params: BotParams,
        body: X402SettingsBody,
      },
    },
    async (request, reply) => {
      const botId = request.params.bot_id;
      const b = request.body;
      const cents: Record<string, number | undefined> = {};
      for (const [field, key] of [
        ['per_transaction_usd', 'per_transaction_cents'],
        ['daily_usd', 'daily_cents'],
        ['monthly_usd', 'monthly_cents'],
        ['approval_threshold_usd', 'approval_threshold_cents'],
      ] as const) {
        if (b[field] === undefined || b[field] === '') continue;
        const value = parseUsdToCents(b[field]);
        const min = key === 'approval_threshold_cents' ? 0 : 1;
        if (value === undefined || value < min || value > 10_000_000) {
          return botPage(request, reply, botId, {
            status: 400,
            top: html`<div class="flash bad" role="alert">Enter amounts such as 0.50 or 25 (at most $100,000).</div>`,
          });
        }
        cents[key] = value;
      }
      try {
        await updateX402Settings(ctx, sessionOf(request).ownerId, botId, {
          ...cents,
          ...(b.approval_mode ? { approval_mode: b.approval_mode } : {}),
          ...(b.allow_domains !== undefined ? { allow_domains: lines(b.allow_domains) } : {}),
          ...(b.deny_domains !== undefined ? { deny_domains: lines(b.deny_domains) } : {}),
          ...(b.allow_pay_to !== undefined ? { allow_pay_to: lines(b.allow_pay_to) } : {}),
          ...(b.deny_pay_to !== undefined ? { deny_pay_to: lines(b.deny_pay_to) } : {}),
        });
      } catch (error) {
        return fail(request, reply, botId, error);
      }
      return reply.redirect(`/bots/${botId}?notice=x402_saved#rails-h`, 303);
    },
  );
}

/** The rails form's partner_wallet branch: turn the wallet on (creating it) or off. */
export async function postPartnerRail(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  status: 'active' | 'inactive',
): Promise<{ ok: true } | { ok: false; status: number; message: string }> {
  try {
    await setPartnerRail(ctx, ownerId, botId, status, undefined);
    return { ok: true };
  } catch (error) {
    if (error instanceof ApiError && error.status < 500 && error.status !== 404) {
      return { ok: false, status: error.status, message: error.message };
    }
    throw error;
  }
}
