import { type Static, Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import QRCode from 'qrcode';
import type { App } from '../app.ts';
import type { AppContext } from '../platform/context.ts';
import { ApiError } from '../platform/errors.ts';
import { IdParam } from '../platform/schemas.ts';
import { getX402Wallet, listX402Payments, updateX402Settings } from '../x402/owner.ts';
import { reconcileWallet } from '../x402/reconcile.ts';
import { setPartnerRail } from '../x402/wallet.ts';
import { html, raw, type SafeHtml } from './html.ts';
import { csrfField, pill, postButton, usd, when } from './layout.ts';
import { parseUsdToCents } from './present.ts';

// The partner wallet (x402, docs/x402.md) on the bot page: the address with a QR code to fund it,
// the balance read from the chain, limits, pay-to and domain lists, recent payments with their
// on-chain transaction hashes; forms to turn it on or off, import a key, and change settings.
// Every action goes through src/x402/ (ownership, audit log, events) and redirects back.

const tags = ['dashboard'];
const Text = (max: number) => Type.Optional(Type.String({ maxLength: max }));
const BotParams = Type.Object({ bot_id: IdParam('bot') });
type BotParamsT = Static<typeof BotParams>;

export const X402_NOTICES: Record<string, string> = {
  x402_on: 'Partner wallet turned on. Send USDC to its address to fund it.',
  x402_off: 'Partner wallet turned off.',
  x402_saved: 'Partner wallet settings saved.',
  x402_refreshed: 'Balance read from the chain.',
};

type BotPageFn = (
  request: FastifyRequest,
  reply: FastifyReply,
  botId: string,
  options: { status?: number; top?: SafeHtml | string },
) => Promise<unknown>;

/** The partner wallet section of the bot page. */
export async function partnerWalletSection(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  railStatus: string,
  csrf: string,
): Promise<SafeHtml> {
  const base = `/bots/${botId}`;
  const heading = html`<div><strong>Partner wallet</strong> ${pill(railStatus)}
    <div class="muted small">A USDC wallet that pays HTTP 402 (x402) resources for the bot, within the limits below.</div></div>`;
  if (!ctx.config.x402) {
    return html`<div class="stack" data-testid="partner-wallet"><div class="spread">${heading}</div>
  <p class="muted small">Not available: the service has no X402_NETWORK configured.</p></div>`;
  }
  let wallet: Awaited<ReturnType<typeof getX402Wallet>> | undefined;
  try {
    wallet = await getX402Wallet(ctx, ownerId, botId);
  } catch (error) {
    if (!(error instanceof ApiError && error.code === 'not_found')) throw error;
  }
  const toggle =
    railStatus === 'active'
      ? postButton(`${base}/rails/partner_wallet`, 'Turn off', csrf, {
          className: 'secondary',
          fields: { status: 'inactive' },
        })
      : postButton(`${base}/rails/partner_wallet`, wallet ? 'Turn on' : 'Turn on (creates a wallet)', csrf, {
          className: 'secondary',
          fields: { status: 'active' },
        });
  const importForm = html`<details><summary>${wallet ? 'Replace the key with one you own…' : 'Use a key you own instead…'}</summary>
    <form method="post" action="${base}/x402/import" class="stack" autocomplete="off">${csrfField(csrf)}
      <p class="small">The key is encrypted at once and never shown again. Use a wallet that holds nothing else.</p>
      <div class="field"><label for="private_key">Private key (0x + 64 hex digits)</label>
        <input id="private_key" name="private_key" type="password" autocomplete="off" spellcheck="false" maxlength="100" required></div>
      <button type="submit" class="secondary">Import key and turn on</button></form></details>`;
  if (!wallet) {
    return html`<div class="stack" data-testid="partner-wallet"><div class="spread">${heading}${toggle}</div>${importForm}</div>`;
  }
  const qr = await QRCode.toString(wallet.address, { type: 'svg', margin: 1, width: 160 });
  const { payments } = await listX402Payments(ctx, ownerId, botId, 10);
  const l = wallet.limits;
  const lists = wallet.lists;
  return html`<div class="stack" data-testid="partner-wallet"><div class="spread">${heading}${toggle}</div>
  <div class="row">
    <figure class="qr" data-testid="partner-qr" aria-label="QR code of the wallet address">${raw(qr)}</figure>
    <dl class="facts">
      <div><dt>Address</dt><dd><code data-testid="partner-address">${wallet.address}</code></dd></div>
      <div><dt>Network</dt><dd>${wallet.network}, USDC <code class="small">${wallet.asset}</code></dd></div>
      <div><dt>On chain</dt><dd data-testid="partner-balance">${wallet.balance_usd === null ? 'not read yet' : `${wallet.balance_usd.toFixed(6)} USDC`} <span class="muted small">${wallet.balance_read_at ? html`read ${when(wallet.balance_read_at)}` : ''}</span></dd></div>
      <div><dt>Spendable</dt><dd>${usd(wallet.ledger.available_usd)}</dd></div>
      <div><dt>On hold / signed</dt><dd>${usd(wallet.ledger.held_usd)} / ${usd(wallet.ledger.authorized_usd)}</dd></div>
    </dl>
  </div>
  <p class="muted small">Fund it by sending USDC on ${wallet.network} to this address (only USDC on this network). The service notices deposits within a minute.</p>
  ${postButton(`${base}/x402/refresh`, 'Read the balance now', csrf, { className: 'secondary' })}
  <details><summary>Limits and lists</summary>
  <form method="post" action="${base}/x402/settings" class="stack">${csrfField(csrf)}
    <div class="grid two">
      <div class="field"><label for="x402_per_tx">Per payment, $</label><input id="x402_per_tx" name="per_transaction_usd" inputmode="decimal" maxlength="16" value="${l.per_transaction_usd.toFixed(2)}"></div>
      <div class="field"><label for="x402_daily">Per day, $</label><input id="x402_daily" name="daily_usd" inputmode="decimal" maxlength="16" value="${l.daily_usd.toFixed(2)}"></div>
      <div class="field"><label for="x402_monthly">Per month, $</label><input id="x402_monthly" name="monthly_usd" inputmode="decimal" maxlength="16" value="${l.monthly_usd.toFixed(2)}"></div>
      <div class="field"><label for="x402_threshold">Ask me above, $<span class="hint">Payments below this are approved at once</span></label><input id="x402_threshold" name="approval_threshold_usd" inputmode="decimal" maxlength="16" value="${l.approval_threshold_usd.toFixed(2)}"></div>
    </div>
    <div class="field"><label for="x402_mode">Approval</label><select id="x402_mode" name="approval_mode">
      <option value="auto_approve_under_threshold"${l.approval_mode === 'auto_approve_under_threshold' ? raw(' selected') : ''}>Approve small payments at once</option>
      <option value="ask_for_everything"${l.approval_mode === 'ask_for_everything' ? raw(' selected') : ''}>Ask me for every payment</option></select></div>
    <div class="grid two">
      <div class="field"><label for="allow_domains">Only these sites<span class="hint">One per line, e.g. api.example.com or *.example.com; empty: any</span></label><textarea id="allow_domains" name="allow_domains" rows="3">${lists.allow_domains.join('\n')}</textarea></div>
      <div class="field"><label for="deny_domains">Never these sites</label><textarea id="deny_domains" name="deny_domains" rows="3">${lists.deny_domains.join('\n')}</textarea></div>
      <div class="field"><label for="allow_pay_to">Only these recipients<span class="hint">Checksummed addresses, one per line; empty: any</span></label><textarea id="allow_pay_to" name="allow_pay_to" rows="3">${lists.allow_pay_to.join('\n')}</textarea></div>
      <div class="field"><label for="deny_pay_to">Never these recipients</label><textarea id="deny_pay_to" name="deny_pay_to" rows="3">${lists.deny_pay_to.join('\n')}</textarea></div>
    </div>
    <button type="submit">Save partner wallet settings</button></form></details>
  ${importForm}
  <h3>Recent x402 payments</h3>${
    payments.length
      ? html`<div class="table-wrap"><table data-testid="x402-payments"><thead><tr><th>When</th><th>Resource</th><th class="num">Amount</th><th>Status</th><th>Transaction</th></tr></thead><tbody>${payments.map(
          (p) =>
            html`<tr><td>${when(p.created_at)}</td><td><code class="small">${p.resource_url}</code></td><td class="num">${usd(p.amount_usd)}</td><td>${pill(p.status)}</td><td>${p.tx_hash ? html`<code class="small">${p.tx_hash}</code>` : html`<span class="muted">—</span>`}</td></tr>`,
        )}</tbody></table></div>`
      : html`<p class="muted">No x402 payments yet.</p>`
  }</div>`;
}

function lines(text: string | undefined): string[] | undefined {
  if (text === undefined) return undefined;
  return text
    .split(/[\s,]+/)
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

  app.post<{ Params: BotParamsT; Body: { private_key?: string } }>(
    '/bots/:bot_id/x402/import',
    {
      schema: {
        tags,
        summary: 'Import a private key for the partner wallet and turn it on',
        params: BotParams,
        body: Type.Object({ private_key: Text(100), _csrf: Text(200) }),
      },
    },
    async (request, reply) => {
      const botId = request.params.bot_id;
      try {
        await setPartnerRail(
          ctx,
          request.dashboard!.ownerId,
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

  app.post<{ Params: BotParamsT }>(
    '/bots/:bot_id/x402/refresh',
    {
      schema: {
        tags,
        summary: 'Read the partner wallet balance from the chain',
        params: BotParams,
        body: Type.Object({ _csrf: Text(200) }),
      },
    },
    async (request, reply) => {
      const botId = request.params.bot_id;
      await getX402Wallet(ctx, request.dashboard!.ownerId, botId);
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

  app.post<{ Params: BotParamsT; Body: Record<string, string | undefined> }>(
    '/bots/:bot_id/x402/settings',
    {
      schema: {
        tags,
        summary: 'Partner wallet limits, approval mode and lists',
        params: BotParams,
        body: Type.Object({
          per_transaction_usd: Text(30),
          daily_usd: Text(30),
          monthly_usd: Text(30),
          approval_threshold_usd: Text(30),
          approval_mode: Type.Optional(
            Type.Union([Type.Literal('ask_for_everything'), Type.Literal('auto_approve_under_threshold')]),
          ),
          allow_domains: Text(20_000),
          deny_domains: Text(20_000),
          allow_pay_to: Text(20_000),
          deny_pay_to: Text(20_000),
          _csrf: Text(200),
        }),
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
        await updateX402Settings(ctx, request.dashboard!.ownerId, botId, {
          ...cents,
          ...(b.approval_mode ? { approval_mode: b.approval_mode as 'ask_for_everything' } : {}),
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
