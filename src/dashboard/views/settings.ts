import type { OwnerTokenView } from '../../owners/tokens.ts';
import { html, type SafeHtml } from '../html.ts';
import { copyable, csrfField, type PageView, postButton, when } from './layout.ts';

// Settings: the owner's API tokens, and the new token shown once after it was created.

export function settingsView(data: {
  csrf: string;
  tokens: OwnerTokenView[];
  top: SafeHtml | string;
  typedName: string;
}): PageView {
  // One block per token rather than a table: name, prefix and dates stay readable at phone width.
  const rows = data.tokens.map(
    (
      t,
    ) => html`<div class="spread" data-testid="token-row"><div><strong>${t.name || 'unnamed'}</strong> <code>${t.token_prefix}…</code>
        <div class="small muted">Created ${when(t.created_at)} · last used ${t.last_used_at ? when(t.last_used_at) : 'never'}</div></div>
        ${postButton(`/settings/tokens/${t.token_id}/revoke`, 'Revoke', data.csrf, { className: 'danger' })}</div>`,
  );
  return {
    title: 'Settings',
    nav: 'settings',
    body: html`<h1>Settings</h1>
${data.top}
<div class="card stack"><h2>Owner API tokens</h2>
  <p class="muted small">A token lets a program act as you through the owner API (<code>Authorization: Bearer svc_owner_…</code>): claim and fund bots, add cards, approve purchases. Only a hash is stored: a token is shown once, when it is created. Revoke a token you no longer use or may have leaked; it stops working at once.</p>
  ${rows.length ? html`<div class="stack">${rows}</div>` : html`<p class="muted">No active tokens.</p>`}
  <form method="post" action="/settings/tokens" class="stack">${csrfField(data.csrf)}
    <div class="field"><label for="token-name">Name of a new token</label><input id="token-name" name="name" type="text" required maxlength="100" placeholder="e.g. laptop, backup script" value="${data.typedName}" autocomplete="off"></div>
    <button type="submit">Create token</button></form></div>`,
  };
}

/** The token just created, shown this once. */
export function newTokenNotice(name: string, token: string): SafeHtml {
  return html`<div class="flash ok stack" role="status"><div>Your new token “${name}”. Copy it now: it is shown only this once.</div>
  <div>${copyable(token, { testid: 'new-token' })}</div>
  <div class="small">Programs send it in the header <code>Authorization: Bearer svc_owner_…</code>. If you lose it, revoke it and create another.</div></div>`;
}
