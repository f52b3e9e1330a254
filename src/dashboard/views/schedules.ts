import type { getBot } from '../../owners/bots.ts';
import type { listSchedules, listTasks } from '../../tasks/schedules.ts';
import { html, type SafeHtml } from '../html.ts';
import { botTabs, csrfField, dataTable, type PageView, pill, postButton, usd, when } from './layout.ts';

// Schedules of a bot: recurring real purchases the bot is handed as tasks, the form for a new one,
// and the tasks handed to the bot recently.

type OwnerBot = Awaited<ReturnType<typeof getBot>>;
type Schedule = Awaited<ReturnType<typeof listSchedules>>['schedules'][number];
type Task = Awaited<ReturnType<typeof listTasks>>['tasks'][number];

export type FormValues = Partial<
  Record<
    | 'cron'
    | 'timezone'
    | 'card_id'
    | 'profile_index'
    | 'merchant_name'
    | 'merchant_url'
    | 'item_name'
    | 'amount_usd'
    | 'category',
    string
  >
>;

export function schedulesView(data: {
  csrf: string;
  bot: OwnerBot;
  schedules: Schedule[];
  tasks: Task[];
  top: SafeHtml | string;
  values?: FormValues | undefined;
}): PageView {
  const { bot, schedules, tasks, csrf } = data;
  const base = `/bots/${bot.bot_id}/schedules`;
  const v = data.values ?? {};
  const cards = bot.cards.filter((c) => c.status !== 'pending_activation');
  const list = schedules.length
    ? html`<ul class="delivery-list">${schedules.map(
        (s) => html`<li class="card stack" data-testid="schedule" data-schedule="${s.schedule_id}">
  <div class="spread"><strong>${s.instructions.item_name}</strong>${pill(s.status === 'paused' ? 'frozen' : s.status, s.status)}</div>
  <div class="small">${usd(s.instructions.amount_cents / 100)} at ${s.instructions.merchant_name} <span class="muted">${s.instructions.merchant_url}</span></div>
  <dl class="facts">
    <div><dt>When</dt><dd><code>${s.cron}</code> <span class="muted small">${s.timezone}</span></dd></div>
    <div><dt>Next</dt><dd>${when(s.next_run_at)}</dd></div>
    <div><dt>Last</dt><dd>${when(s.last_run_at)}</dd></div>
    <div><dt>Profile</dt><dd>${s.instructions.profile_index} <span class="muted small">${s.instructions.category}</span></dd></div>
  </dl>
  <div class="row">${
    s.status === 'active'
      ? postButton(`${base}/${s.schedule_id}/pause`, 'Pause', csrf, { className: 'secondary' })
      : postButton(`${base}/${s.schedule_id}/resume`, 'Resume', csrf, { className: 'secondary' })
  }${postButton(`${base}/${s.schedule_id}/delete`, 'Delete', csrf, { className: 'danger' })}</div></li>`,
      )}</ul>`
    : html`<div class="card empty"><p class="muted">No schedules yet.</p></div>`;
  const form = cards.length
    ? html`<form method="post" action="${base}" class="stack">${csrfField(csrf)}
  <div class="grid two">
    <div class="field"><label for="item_name">Item</label><input id="item_name" name="item_name" required maxlength="500" value="${v.item_name ?? ''}"></div>
    <div class="field"><label for="amount_usd">Amount, $</label><input id="amount_usd" name="amount_usd" type="number" min="0.01" step="0.01" inputmode="decimal" required value="${v.amount_usd ?? ''}"></div>
    <div class="field"><label for="merchant_name">Merchant</label><input id="merchant_name" name="merchant_name" required maxlength="200" value="${v.merchant_name ?? ''}"></div>
    <div class="field"><label for="merchant_url">Merchant web address</label><input id="merchant_url" name="merchant_url" type="url" required maxlength="2000" placeholder="https://" value="${v.merchant_url ?? ''}"></div>
    <div class="field"><label for="cron">When (cron) <span class="hint">For example <code>0 9 * * 1</code> every Monday at 9:00, or <code>@daily</code></span></label><input id="cron" name="cron" required maxlength="200" value="${v.cron ?? ''}"></div>
    <div class="field"><label for="timezone">Time zone <span class="hint">For example Europe/Berlin</span></label><input id="timezone" name="timezone" required maxlength="100" value="${v.timezone ?? 'UTC'}"></div>
    <div class="field"><label for="card_id">Card</label><select id="card_id" name="card_id">${cards.map(
      (c) =>
        html`<option value="${String(c.card_id)}"${v.card_id === c.card_id ? html` selected` : ''}>${String(c.label ?? c.card_id)}</option>`,
    )}</select></div>
    <div class="field"><label for="category">Category <span class="hint">Optional</span></label><input id="category" name="category" maxlength="100" value="${v.category ?? ''}"></div>
  </div>
  <p class="muted small">A schedule buys for real, with the card's real profile; you approve its purchases by creating it (the card's limits still apply, and you are not asked each time).</p>
  <button type="submit">Create schedule</button></form>`
    : html`<p class="muted">Add and activate a card first: <a href="/bots/${bot.bot_id}/cards">Cards</a>.</p>`;
  const taskRows = tasks.length
    ? dataTable(
        [{ label: 'What', key: true }, { label: 'Status', key: true }, { label: 'Due' }, { label: 'Kind' }],
        tasks.map((t) => ({
          cells: [
            html`${t.item_name} <span class="muted small">${usd(t.amount_usd)} at ${t.merchant_name}</span>`,
            pill(t.status),
            when(t.due_at),
            t.kind.replace(/_/g, ' '),
          ],
        })),
      )
    : html`<p class="muted">No tasks handed to the bot yet.</p>`;
  const body = html`<p class="small"><a href="/">← All bots</a></p>
<h1>${bot.bot_name}: schedules</h1>
<p class="lead">Recurring purchases: when one is due, your bot receives it as a task and buys it within your card's limits and approval rules.</p>
${botTabs(bot.bot_id, 'schedules')}
${data.top}
${list}
<section class="card stack" aria-labelledby="new-h"><h2 id="new-h">New schedule</h2>${form}</section>
<section class="card" aria-labelledby="tasks-h"><h2 id="tasks-h">Recent tasks</h2>
  <p class="muted small">Decoy tasks keep the bot's behaviour indistinguishable; they never spend money.</p>${taskRows}</section>`;
  return { title: `${bot.bot_name}: schedules`, nav: 'bots', body };
}
