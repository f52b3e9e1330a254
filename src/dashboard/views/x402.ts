import type { getX402Wallet, listX402Payments } from '../../x402/owner.ts';
import { html, raw, type SafeHtml } from '../html.ts';
import { csrfField, pill, postButton, usd, when } from './layout.ts';

// The partner wallet (x402, docs/x402.md) on the bot page: the address with a QR code to fund it,
// the balance read from the chain, limits, pay-to and domain lists, recent payments with their
// on-chain transaction hashes; forms to turn it on or off, import a key, and change settings.

export type PartnerWalletData =
  | { configured: false }
  | { configured: true; wallet: undefined }
  | {
      configured: true;
      wallet: Awaited<ReturnType<typeof getX402Wallet>>;
      /** The address as a QR code (SVG made by the qrcode package from the address alone). */
      qrSvg: string;
      payments: Awaited<ReturnType<typeof listX402Payments>>['payments'];
    };

/** The partner wallet section of the bot page. */
export function partnerWalletSection(
  botId: string,
  railStatus: string,
  csrf: string,
  data: PartnerWalletData,
): SafeHtml {
  const base = `/bots/${botId}`;
  const heading = html`<div><strong>Partner wallet</strong> ${pill(railStatus)}
    <div class="muted small">A USDC wallet that pays HTTP 402 (x402) resources for the bot, within the limits below.</div></div>`;
  if (!data.configured) {
    return html`<div class="stack" data-testid="partner-wallet"><div class="spread">${heading}</div>
  <p class="muted small">Not available: the service has no X402_NETWORK configured.</p></div>`;
  }
  const wallet = data.wallet;
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
  if (data.wallet === undefined) {
    return html`<div class="stack" data-testid="partner-wallet"><div class="spread">${heading}${toggle}</div>${importForm}</div>`;
  }
  const { payments } = data;
  const w = data.wallet;
  const l = w.limits;
  const lists = w.lists;
  return html`<div class="stack" data-testid="partner-wallet"><div class="spread">${heading}${toggle}</div>
  <div class="row">
    <figure class="qr" data-testid="partner-qr" aria-label="QR code of the wallet address">${raw(data.qrSvg)}</figure>
    <dl class="facts">
      <div><dt>Address</dt><dd><code data-testid="partner-address">${w.address}</code></dd></div>
      <div><dt>Network</dt><dd>${w.network}, USDC <code class="small">${w.asset}</code></dd></div>
      <div><dt>On chain</dt><dd data-testid="partner-balance">${w.balance_usd === null ? 'not read yet' : `${w.balance_usd.toFixed(6)} USDC`} <span class="muted small">${w.balance_read_at ? html`read ${when(w.balance_read_at)}` : ''}</span></dd></div>
      <div><dt>Spendable</dt><dd>${usd(w.ledger.available_usd)}</dd></div>
      <div><dt>On hold / signed</dt><dd>${usd(w.ledger.held_usd)} / ${usd(w.ledger.authorized_usd)}</dd></div>
    </dl>
  </div>
  <p class="muted small">Fund it by sending USDC on ${w.network} to this address (only USDC on this network). The service notices deposits within a minute.</p>
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
