import { html, type HtmlValue, type SafeHtml } from '../html.ts';
import type { DashboardSession } from '../sessions.ts';

// The page shell shared by every dashboard page, the navigation, and small view helpers. Views
// (this folder) are pure: data in, SafeHtml out; no database, no request. Handlers send a view with
// `reply.page(view, status)` (src/dashboard/http.ts), which wraps it in this shell for the
// request's session.

export interface NavItem {
  key: string;
  href: string;
  label: string;
}

/**
 * The main navigation. Later features add their pages here (approvals inbox, schedules…) and on
 * the bot page's tabs below, so every page shares one header.
 */
export const MAIN_NAV: NavItem[] = [
  { key: 'bots', href: '/', label: 'Bots' },
  { key: 'approvals', href: '/approvals', label: 'Approvals' },
  { key: 'pairing', href: '/pairing', label: 'Pairing codes' },
  { key: 'guardrails', href: '/guardrails', label: 'Guardrails' },
  { key: 'activity', href: '/activity', label: 'Activity' },
  { key: 'settings', href: '/settings', label: 'Settings' },
];

/** Tabs of a bot's pages: `/bots/<id><path>`. Cards, webhook log and schedules slot in here. */
export const BOT_TABS: Array<{ key: string; path: string; label: string }> = [
  { key: 'overview', path: '', label: 'Overview' },
  { key: 'cards', path: '/cards', label: 'Cards' },
  { key: 'webhooks', path: '/webhooks', label: 'Webhook log' },
  { key: 'schedules', path: '/schedules', label: 'Schedules' },
];

/** The bot's tab bar with `current` marked. */
export function botTabs(botId: string, current: string): SafeHtml {
  return html`<ul class="subnav">${BOT_TABS.map(
    (t) =>
      html`<li><a href="/bots/${botId}${t.path}"${t.key === current ? html` aria-current="page"` : ''}>${t.label}</a></li>`,
  )}</ul>`;
}

/** What a view gives the page shell. */
export interface PageView {
  title: string;
  body: SafeHtml;
  /** Which MAIN_NAV entry is current. */
  nav?: string;
  /** Narrow centred layout for sign-in and message pages. */
  narrow?: boolean;
  /** Sign-in pages: no account header or navigation, even for a browser that is signed in. */
  noSession?: boolean;
  /** Scripts served by the dashboard itself (progressive enhancement only; CSP: script-src 'self'). */
  scripts?: string[];
}

/** A count badge beside a navigation entry (e.g. purchases waiting in the approvals inbox). */
function navBadge(count: number | undefined): SafeHtml | string {
  if (!count) return '';
  return html` <span class="count" data-testid="nav-count" aria-label="${count} waiting">${count > 99 ? '99+' : count}</span>`;
}

/** The whole document: header and navigation for the session (if any) around the view. */
export function page(options: PageView, signedIn?: DashboardSession): SafeHtml {
  const session = options.noSession ? undefined : signedIn;
  const header = html`<header class="top"><div class="top-inner">
  <a class="brand" href="/"><span class="brand-mark" aria-hidden="true">$</span>Bot Payment Service</a>
  ${
    session
      ? html`<nav class="main" aria-label="Main">${MAIN_NAV.map(
          (item) =>
            html`<a href="${item.href}"${options.nav === item.key ? html` aria-current="page"` : ''}>${item.label}${
              item.key === 'approvals' ? navBadge(session.pendingApprovals) : ''
            }</a>`,
        )}</nav>
  <div class="who"><span class="small" title="${session.email}">${session.email}</span>
    <form method="post" action="/signout">${csrfField(session.csrfToken)}<button class="link" type="submit">Sign out</button></form></div>`
      : ''
  }
</div></header>`;
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="referrer" content="same-origin">
${session ? html`<meta name="csrf-token" content="${session.csrfToken}">` : ''}
<title>${options.title} · Bot Payment Service</title>
<link rel="stylesheet" href="/assets/dashboard.css">
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<script src="/assets/dashboard.js" defer></script>
${(options.scripts ?? []).map((src) => html`<script src="${src}" defer></script>`)}
</head><body>
${header}
<main${options.narrow ? html` class="center"` : ''}>${options.body}</main>
<footer>Bot Payment Service · your bots spend only what you allow.</footer>
</body></html>`;
}

export function csrfField(token: string): SafeHtml {
  return html`<input type="hidden" name="_csrf" value="${token}">`;
}

/** A one-button form (POST with the CSRF token). */
export function postButton(
  action: string,
  label: string,
  csrfToken: string,
  options: { className?: string; fields?: Record<string, string> } = {},
): SafeHtml {
  return html`<form method="post" action="${action}" class="inline">${csrfField(csrfToken)}${Object.entries(
    options.fields ?? {},
  ).map(
    ([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`,
  )}<button type="submit"${options.className ? html` class="${options.className}"` : ''}>${label}</button></form>`;
}

export function flash(kind: 'ok' | 'bad' | 'info' | 'warn', message: HtmlValue): SafeHtml {
  return html`<div class="flash ${kind}" role="${kind === 'bad' ? 'alert' : 'status'}">${message}</div>`;
}

export function usd(amount: number): string {
  const sign = amount < 0 ? '−' : '';
  return `${sign}$${Math.abs(amount).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 })}`;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** "5 Jan 2026, 12:00 UTC": the server's rendering, always in UTC. */
export function utcText(isoTime: string): string {
  const d = new Date(isoTime);
  return `${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]} ${d.getUTCFullYear()}, ${String(d.getUTCHours()).padStart(2, '0')}:${String(d.getUTCMinutes()).padStart(2, '0')} UTC`;
}

/**
 * A time in UTC inside a <time> element (readable without script). /assets/dashboard.js adds the
 * relative time ("5 min ago") and the time in the browser's own zone beside it.
 */
export function when(isoTime: string | null | undefined): SafeHtml {
  if (!isoTime) return html`<span class="muted">—</span>`;
  // Date and clock each stay on one line; between them the line may break in a narrow column.
  const [date, clock] = utcText(isoTime).split(', ');
  return html`<span class="when"><time datetime="${isoTime}"><span>${date},</span> <span>${clock}</span></time></span>`;
}

/**
 * A value shown for copying (keys, secrets, codes): selectable text, and a Copy button that
 * /assets/dashboard.js reveals (without script the button stays hidden; the text is select-all).
 */
export function copyable(value: string, options: { testid?: string; big?: boolean } = {}): SafeHtml {
  return html`<span class="copy-row"><span class="${options.big ? 'code-big' : 'secret'}"${
    options.testid ? html` data-testid="${options.testid}"` : ''
  }>${value}</span><button type="button" class="secondary copy" data-copy="${value}" hidden>Copy</button></span>`;
}

export interface Column {
  label: string;
  /** Right-aligned figures. */
  num?: boolean;
  /**
   * Key facts: on a phone the table turns into one block per row, the key cells first on one line
   * without labels, the others below with their column label.
   */
  key?: boolean;
}

export interface Row {
  cells: HtmlValue[];
  /** Extra attributes of the <tr> (data-testid …). */
  attrs?: Record<string, string>;
}

/** A table that fits a phone: columns that matter first (`key`), the rest labelled below them. */
export function dataTable(columns: Column[], rows: Row[], options: { className?: string } = {}): SafeHtml {
  return html`<div class="table-wrap"><table class="rt${options.className ? ` ${options.className}` : ''}"><thead><tr>${columns.map(
    (c) => html`<th${c.num ? html` class="num"` : ''} scope="col">${c.label}</th>`,
  )}</tr></thead><tbody>${rows.map(
    (r) =>
      html`<tr${Object.entries(r.attrs ?? {}).map(([k, v]) => html` ${k}="${v}"`)}>${r.cells.map(
        (cell, i) => {
          const c = columns[i] ?? { label: '' };
          const cls = [c.num ? 'num' : '', c.key ? 'k' : ''].filter(Boolean).join(' ');
          return html`<td data-label="${c.label}"${cls ? html` class="${cls}"` : ''}>${cell}</td>`;
        },
      )}</tr>`,
  )}</tbody></table></div>`;
}

const PILL_KIND: Record<string, string> = {
  active: 'ok',
  pending: 'warn',
  pending_owner_verification: 'warn',
  pending_activation: 'warn',
  degraded: 'warn',
  frozen: 'bad',
  unreachable: 'bad',
  inactive: '',
  used: '',
  expired: '',
  approved: 'ok',
  delivered: 'ok',
  denied: 'bad',
  failed: 'bad',
  acked: '',
};

export function pill(status: string, label = status.replace(/_/g, ' ')): SafeHtml {
  return html`<span class="pill ${PILL_KIND[status] ?? ''}">${label}</span>`;
}

/** A centred card with a title, text and optional actions (sign-in, errors, confirmations). */
export function messageBody(title: string, text: HtmlValue, actions: HtmlValue = ''): SafeHtml {
  return html`<div class="card stack"><h1>${title}</h1><div class="lead">${text}</div>${actions}</div>`;
}

/**
 * A message page (errors, problems with links). Without `actions`: back to the bots when signed
 * in, else to sign-in.
 */
export function messageView(
  title: string,
  text: HtmlValue,
  options: { signedIn?: boolean; actions?: HtmlValue } = {},
): PageView {
  const actions =
    options.actions ??
    (options.signedIn
      ? html`<a class="button" href="/">Back to your bots</a>`
      : html`<a class="button" href="/signin">Sign in</a>`);
  return { title, narrow: true, body: messageBody(title, text, actions) };
}

/** The friendly 404 (unknown paths, and records that are not the owner's). */
export function notFoundView(signedIn: boolean): PageView {
  return messageView('Not found', 'There is nothing here, or it belongs to another account.', { signedIn });
}
