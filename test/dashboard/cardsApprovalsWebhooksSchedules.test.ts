import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { preSessionCsrfToken } from '../../src/dashboard/sessions.ts';
import type { Mail } from '../../src/platform/mailer.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { csrfIn, type FormClient, formFields, signIn } from './browserless.ts';
import { splitCard } from '../support/cards.ts';

// Phase 2 pages in-process, through the same forms a person submits: the card wizard and card
// settings, the approvals inbox, the approval e-mail and its one-click links, the webhook delivery
// log. Security: CSRF on every new form, another owner's bot / card / confirmation / delivery is
// 404 on every page and action, expired / reused / forged one-click links. The mailer is the
// capturing one (the SMTP server is the edge of the world; the browser test uses a real one).

let svc: TestService;
let alice: FormClient;
let mallory: FormClient;
let aliceOwner: Awaited<ReturnType<typeof createOwner>>;
let malloryOwner: Awaited<ReturnType<typeof createOwner>>;
let bot: Awaited<ReturnType<typeof activeBot>>;
let malloryBot: Awaited<ReturnType<typeof activeBot>>;

beforeAll(async () => {
  svc = await createTestService();
  aliceOwner = await createOwner(svc, 'alice2@example.com');
  malloryOwner = await createOwner(svc, 'mallory2@example.com');
  bot = await activeBot(svc, aliceOwner, { fundCents: 10_000, body: { bot_name: 'Shopper <b>' } });
  malloryBot = await activeBot(svc, malloryOwner, { fundCents: 10_000 });
  alice = await signIn(svc, 'alice2@example.com', '10.60.0.1');
  mallory = await signIn(svc, 'mallory2@example.com', '10.60.0.2');
});
afterAll(async () => {
  await svc.close();
});

interface CardRow {
  status: string;
  profiles_enc: string | null;
  per_transaction_cents: number;
  daily_cents: number;
  approval_mode: string;
  approval_threshold_cents: number;
  approved_categories: string[];
  missing_position: number;
  real_profile_index: number;
  [key: string]: unknown;
}

async function cardRow(cardId: string): Promise<CardRow> {
  const rows = await svc.ctx.db.query<CardRow>(
    `SELECT status, profiles_enc, (per_transaction_micros / 10000.0)::float8 AS per_transaction_cents, (daily_micros / 10000.0)::float8 AS daily_cents,
            approval_mode, (approval_threshold_micros / 10000.0)::float8 AS approval_threshold_cents, approved_categories,
            missing_position, real_profile_index
       FROM cards WHERE id = $1`,
    [cardId],
  );
  return rows[0]!;
}

async function confirmationStatus(id: string): Promise<string> {
  const rows = await svc.ctx.db.query<{ status: string }>(
    'SELECT status FROM checkout_confirmations WHERE id = $1',
    [id],
  );
  return rows[0]!.status;
}

async function auditActions(botId: string): Promise<string[]> {
  const rows = await svc.ctx.db.query<{ action: string }>(
    'SELECT action FROM audit_log WHERE bot_id = $1 ORDER BY created_at, action',
    [botId],
  );
  return rows.map((r) => r.action);
}

/**
 * What the card wizard's script sends from the owner's browser: the activation body (built by
 * src/cards/split.ts, as the script does) to the owner API, with the session cookie and the page's
 * CSRF token in X-CSRF-Token.
 */
async function activateFromPage(client: FormClient, botId: string, cardId: string, body?: unknown) {
  const page = await client.get(`/bots/${botId}/cards/${cardId}`);
  const form = /<form id="card-wizard"[^>]*>/.exec(page.body)![0];
  const attr = (name: string) => new RegExp(`${name}="([^"]*)"`).exec(form)![1]!;
  const start = {
    card_id: attr('data-card-id'),
    bot_id: attr('data-bot-id'),
    real_profile_index: Number(attr('data-real-index')),
    missing_digit_positions: attr('data-positions').split(',').map(Number),
  };
  return svc.app.inject({
    method: 'POST',
    url: `/api/v1/owner/bots/${botId}/cards/${cardId}/activate`,
    headers: {
      cookie: client.cookieHeader(),
      'x-csrf-token': attr('data-csrf'),
      'content-type': 'application/json',
    },
    // The test owner adds one test number to several bots, each a card of its own here (the wizard
    // sends different_card once the owner says so; test/checkout/sameCard.test.ts).
    payload: JSON.stringify(
      body ?? {
        ...splitCard(start, { expiry: { expiry_month: '09', expiry_year: '2031' } }).activation,
        different_card: true,
      },
    ),
  });
}

/** Starts a card through the dashboard form and activates it as the wizard does; returns its id. */
async function cardThroughWizard(client: FormClient, botId: string): Promise<string> {
  const start = await client.submit(`/bots/${botId}/cards`, `/bots/${botId}/cards`, { label: 'Visa 42' });
  expect(start.statusCode).toBe(303);
  const location = String(start.headers.location);
  const cardId = /\/cards\/(card_[a-z2-7]+)\?notice=started$/.exec(location)?.[1];
  expect(cardId, location).toBeDefined();
  const activate = await activateFromPage(client, botId, cardId!);
  expect(activate.statusCode, activate.body).toBe(200);
  return cardId!;
}

async function heldPurchase(
  b: { auth: Record<string, string> },
  profileIndex: number,
  item = 'A book',
): Promise<string> {
  const res = await svc.app.inject({
    method: 'POST',
    url: '/api/v1/bot/merchant/checkout',
    headers: b.auth,
    payload: {
      profile_index: profileIndex,
      merchant_name: 'Acme Books',
      merchant_url: 'https://acme.example/books/1',
      item_name: item,
      amount_cents: 250,
      category: 'books',
    },
  });
  expect(res.statusCode, res.body).toBe(202);
  return res.json().confirmation_id as string;
}

async function mailAbout(confirmationId: string, to: string): Promise<Mail> {
  return vi.waitFor(
    () => {
      const mail = svc.mailer.sent.find((m) => m.to === to && m.text.includes(confirmationId));
      if (!mail) throw new Error('no approval mail yet');
      return mail;
    },
    { timeout: 5000, interval: 20 },
  );
}

function linkIn(mail: Mail, decision: 'approve' | 'deny'): string {
  const m = new RegExp(`(https?://\\S+/approvals/one-click/${decision}\\?\\S+)`).exec(mail.text);
  if (!m) throw new Error(`no ${decision} link`);
  const url = new URL(m[1]!);
  return `${url.pathname}${url.search}`;
}

let cardId: string;
let realIndex: number;
let malloryCardId: string;
let malloryConfirmation: string;

describe('card wizard and settings', () => {
  it('starts a card; the wizard splits it in the browser and sends only the activation; bad input changes nothing', async () => {
    const start = await alice.submit(`/bots/${bot.bot_id}/cards`, `/bots/${bot.bot_id}/cards`, {
      label: 'Visa 42',
    });
    expect(start.statusCode).toBe(303);
    cardId = /\/cards\/(card_[a-z2-7]+)/.exec(String(start.headers.location))![1]!;
    const row = await cardRow(cardId);
    expect(row.status).toBe('pending_activation');
    realIndex = row.real_profile_index;

    const wizard = await alice.get(String(start.headers.location));
    expect(wizard.statusCode).toBe(200);
    expect(wizard.body).toContain('Card started');
    // The card fields have no name: a browser never submits them. The script does the work.
    const form = /<form id="card-wizard"[\s\S]*?<\/form>/.exec(wizard.body)![0];
    expect(form).toContain('id="card-number"');
    expect(form).not.toMatch(/ name="/);
    expect(form).not.toMatch(/ action="/);
    expect(wizard.body).toContain('<script src="/assets/card-wizard.js"></script>');
    expect(wizard.body).toContain('botpay card split');
    expect(String(wizard.headers['content-security-policy'])).toContain("connect-src 'self'");
    const script = await alice.get('/assets/card-wizard.js');
    expect(script.statusCode).toBe(200);
    expect(String(script.headers['content-type'])).toContain('javascript');
    expect(script.body).toContain('x-csrf-token');
    expect(script.body).toContain('/activate');

    // Wrong input or a missing CSRF token: refused, nothing stored.
    const noCsrf = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/cards/${cardId}/activate`,
      headers: { cookie: alice.cookieHeader(), 'content-type': 'application/json' },
      payload: JSON.stringify(
        splitCard({
          card_id: cardId,
          bot_id: bot.bot_id,
          real_profile_index: realIndex,
          missing_digit_positions: [row.missing_position],
        }).activation,
      ),
    });
    expect(noCsrf.statusCode).toBe(403);
    for (const bad of [{ bin: '12' }, { expiry_month: '13' }, { profiles: [] }]) {
      const res = await activateFromPage(alice, bot.bot_id, cardId, { ...bad, card_length: 16 });
      expect(res.statusCode, JSON.stringify(bad)).toBe(400);
      expect(res.json().message.length).toBeGreaterThan(5);
      expect((await cardRow(cardId)).status).toBe('pending_activation');
    }

    const ok = await activateFromPage(alice, bot.bot_id, cardId);
    expect(ok.statusCode, ok.body).toBe(200);
    const active = await cardRow(cardId);
    expect(active.status).toBe('active');
    const stored = JSON.parse(svc.ctx.secrets.decrypt(active.profiles_enc!)) as Array<
      Record<string, string | number>
    >;
    expect(stored.find((p) => p.profile_index === realIndex)).toEqual({
      profile_index: realIndex,
      missing_digits: '739',
      expiry_month: '09',
      expiry_year: '2031',
    });
    const again = await alice.get(`/bots/${bot.bot_id}/cards/${cardId}?notice=activated`);
    expect(again.body).toContain('saved by your browser');
    expect(again.body).not.toContain('id="card-wizard"');
    expect(again.body).not.toContain('/profiles-file');
    expect(await auditActions(bot.bot_id)).toEqual(
      expect.arrayContaining(['card.started', 'card.activated']),
    );
  });

  it('the service has no profiles file of a card split in the browser', async () => {
    const file = await alice.get(`/bots/${bot.bot_id}/cards/${cardId}/profiles-file`);
    expect(file.statusCode).toBe(409);
    const api = await svc.app.inject({
      url: `/api/v1/owner/bots/${bot.bot_id}/cards/${cardId}/profiles-file`,
      headers: aliceOwner.auth,
    });
    expect(api.statusCode).toBe(409);
  });

  it('edits guardrails, approval mode, categories, status and a profile; bad amounts change nothing', async () => {
    const page = `/bots/${bot.bot_id}/cards/${cardId}`;
    const bad = await alice.submit(page, `${page}/settings`, { per_transaction_usd: '1.234' });
    expect(bad.statusCode).toBe(400);
    expect((await cardRow(cardId)).per_transaction_cents).toBe(500);

    const ok = await alice.submit(page, `${page}/settings`, {
      per_transaction_usd: '4.50',
      daily_usd: '15',
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_usd: '1',
      approved_categories: 'Books, food ,',
    });
    expect(ok.statusCode).toBe(303);
    let row = await cardRow(cardId);
    expect(row).toMatchObject({
      per_transaction_cents: 450,
      daily_cents: 1500,
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 100,
      approved_categories: ['books', 'food'],
    });

    expect((await alice.submit(page, `${page}/status`, { status: 'frozen' })).statusCode).toBe(303);
    expect((await cardRow(cardId)).status).toBe('frozen');
    const frozenPage = await alice.get(page);
    expect(frozenPage.body).toContain('Unfreeze card');
    expect(
      (
        await alice.post(`${page}/status`, {
          status: 'active',
          _csrf: csrfIn(frozenPage.body, `${page}/status`),
        })
      ).statusCode,
    ).toBe(303);
    expect((await cardRow(cardId)).status).toBe('active');

    const profile = await alice.post(`${page}/profiles`, {
      ...formFields((await alice.get(page)).body, `${page}/profiles`),
      [`p${realIndex}_allowance_usd`]: '30',
      [`p${realIndex}_allowance_window`]: 'week',
      [`p${realIndex}_approval_rule`]: 'ask_for_everything',
      [`p${realIndex}_approval_threshold_usd`]: '0',
      [`p${realIndex}_enabled`]: 'yes',
    });
    expect(profile.statusCode).toBe(303);
    const p = await svc.ctx.db.query<{
      allowance_cents: number;
      allowance_window: string;
      approval_rule: string;
    }>(
      'SELECT (allowance_micros / 10000.0)::float8 AS allowance_cents, allowance_window, approval_rule FROM card_profiles WHERE card_id = $1 AND profile_index = $2',
      [cardId, realIndex],
    );
    expect(p[0]).toEqual({
      allowance_cents: 3000,
      allowance_window: 'week',
      approval_rule: 'ask_for_everything',
    });

    // Back to asking for everything for the approvals tests below.
    await alice.submit(page, `${page}/settings`, { approval_mode: 'ask_for_everything' });
    row = await cardRow(cardId);
    expect(row.approval_mode).toBe('ask_for_everything');
    expect(await auditActions(bot.bot_id)).toEqual(
      expect.arrayContaining(['card.updated', 'card.profile_updated']),
    );
    const botPage = await alice.get(`/bots/${bot.bot_id}`);
    expect(botPage.body).toContain('Changed card settings');
  });

  it('the settings form shows the current values; a field left as shown changes nothing', async () => {
    const page = `/bots/${bot.bot_id}/cards/${cardId}`;
    const before = await cardRow(cardId);
    const audits = async () => (await auditActions(bot.bot_id)).filter((a) => a === 'card.updated').length;
    const updates = await audits();
    const fields = formFields((await alice.get(page)).body, `${page}/settings`);
    expect(fields).toMatchObject({
      per_transaction_usd: (before.per_transaction_cents / 100).toFixed(2),
      daily_usd: (before.daily_cents / 100).toFixed(2),
      approval_mode: before.approval_mode,
      approval_threshold_usd: (before.approval_threshold_cents / 100).toFixed(2),
    });
    const same = await alice.post(`${page}/settings`, fields);
    expect(same.headers.location).toBe(`${page}?notice=unchanged`);
    expect((await alice.get(`${page}?notice=unchanged`)).body).toContain('Nothing to save');
    expect(await audits()).toBe(updates);
    // Mallory sending Alice's form as shown is still not found.
    const stranger = await mallory.post(`${page}/settings`, {
      ...fields,
      _csrf: csrfIn((await mallory.get('/')).body, '/signout'),
    });
    expect(stranger.statusCode).toBe(404);

    // The per-purchase limit changes elsewhere (the owner API) after the page was shown; the
    // stale form, with only the daily limit changed, does not put the old per-purchase limit back.
    const elsewhere = await svc.app.inject({
      method: 'PATCH',
      url: `/api/v1/owner/bots/${bot.bot_id}/cards/${cardId}`,
      headers: aliceOwner.auth,
      payload: { per_transaction_cents: before.per_transaction_cents + 100 },
    });
    expect(elsewhere.statusCode, elsewhere.body).toBe(200);
    const saved = await alice.post(`${page}/settings`, {
      ...fields,
      daily_usd: ((before.daily_cents + 500) / 100).toFixed(2),
    });
    expect(saved.statusCode).toBe(303);
    const after = await cardRow(cardId);
    expect(after).toMatchObject({
      per_transaction_cents: before.per_transaction_cents + 100,
      daily_cents: before.daily_cents + 500,
      approval_mode: before.approval_mode,
    });
    // Back as it was for the tests below.
    await alice.post(`${page}/settings`, {
      ...formFields((await alice.get(page)).body, `${page}/settings`),
      per_transaction_usd: (before.per_transaction_cents / 100).toFixed(2),
      daily_usd: (before.daily_cents / 100).toFixed(2),
    });
    expect(await cardRow(cardId)).toMatchObject({
      per_transaction_cents: before.per_transaction_cents,
      daily_cents: before.daily_cents,
    });
  });
});

describe('card profiles in one form', () => {
  interface ProfileRow {
    profile_index: number;
    allowance_cents: number;
    allowance_window: string;
    approval_rule: string;
    enabled: boolean;
    [key: string]: unknown;
  }
  async function profiles(): Promise<ProfileRow[]> {
    return svc.ctx.db.query<ProfileRow>(
      `SELECT profile_index, (allowance_micros / 10000.0)::float8 AS allowance_cents, allowance_window, approval_rule, enabled
         FROM card_profiles WHERE card_id = $1 ORDER BY profile_index`,
      [cardId],
    );
  }
  const profileUpdates = async () =>
    (await auditActions(bot.bot_id)).filter((a) => a === 'card.profile_updated').length;

  it('one Save for every profile; only what changed is written; a bad amount saves nothing', async () => {
    const page = `/bots/${bot.bot_id}/cards/${cardId}`;
    const shown = await alice.get(page);
    expect(shown.body.match(/<button type="submit"[^>]*>Save profile/g)).toEqual([
      '<button type="submit">Save profile',
    ]);
    expect(shown.body).toContain('>Save profiles</button>');
    const fields = formFields(shown.body, `${page}/profiles`);
    const before = await profiles();
    expect(before).toHaveLength(6);
    for (const p of before) {
      expect(fields).toMatchObject({
        [`p${p.profile_index}_allowance_usd`]: (p.allowance_cents / 100).toFixed(2),
        [`p${p.profile_index}_allowance_window`]: p.allowance_window,
        [`p${p.profile_index}_approval_rule`]: p.approval_rule,
        [`p${p.profile_index}_enabled`]: p.enabled ? 'yes' : 'no',
      });
    }
    const updates = await profileUpdates();

    // Saved as shown: nothing is written.
    const same = await alice.post(`${page}/profiles`, fields);
    expect(same.headers.location).toBe(`${page}?notice=unchanged#profiles-h`);
    expect(await profiles()).toEqual(before);
    expect(await profileUpdates()).toBe(updates);

    // A bad amount in one profile: nothing is saved, not even the good change in another.
    const decoy = before.find((p) => p.profile_index !== realIndex)!.profile_index;
    const refused = await alice.post(`${page}/profiles`, {
      ...fields,
      [`p${decoy}_allowance_usd`]: '41',
      [`p${realIndex}_approval_threshold_usd`]: '1.234',
    });
    expect(refused.statusCode).toBe(400);
    expect(refused.body).toContain(`Profile ${realIndex}: amounts are dollars`);
    expect(formFields(refused.body, `${page}/profiles`)).toMatchObject({
      [`p${decoy}_allowance_usd`]: '41',
      [`p${realIndex}_approval_threshold_usd`]: '1.234',
    });
    expect(await profiles()).toEqual(before);

    // Two profiles changed in one Save; the other four stay as they were.
    const saved = await alice.post(`${page}/profiles`, {
      ...fields,
      [`p${decoy}_allowance_usd`]: '41',
      [`p${decoy}_allowance_window`]: 'month',
      [`p${realIndex}_enabled`]: 'no',
    });
    expect(saved.headers.location).toBe(`${page}?notice=profiles#profiles-h`);
    const after = await profiles();
    for (const p of after) {
      const was = before.find((x) => x.profile_index === p.profile_index)!;
      if (p.profile_index === decoy) {
        expect(p).toEqual({ ...was, allowance_cents: 4100, allowance_window: 'month' });
      } else if (p.profile_index === realIndex) {
        expect(p).toEqual({ ...was, enabled: false });
      } else {
        expect(p).toEqual(was);
      }
    }
    expect(await profileUpdates()).toBe(updates + 2);

    // Another owner cannot post the form.
    const stranger = await mallory.post(`${page}/profiles`, {
      ...fields,
      _csrf: csrfIn((await mallory.get('/')).body, '/signout'),
    });
    expect(stranger.statusCode).toBe(404);

    // Back as it was for the tests below.
    const restore = formFields((await alice.get(page)).body, `${page}/profiles`);
    for (const p of before) {
      restore[`p${p.profile_index}_allowance_usd`] = (p.allowance_cents / 100).toFixed(2);
      restore[`p${p.profile_index}_allowance_window`] = p.allowance_window;
      restore[`p${p.profile_index}_enabled`] = p.enabled ? 'yes' : 'no';
    }
    await alice.post(`${page}/profiles`, restore);
    expect(await profiles()).toEqual(before);
  });
});

describe('approvals inbox and e-mail', () => {
  it('mails the owner for every hold, on a decoy as on the real profile; the inbox lists both alike', async () => {
    const decoyIndex = realIndex === 1 ? 2 : 1;
    const decoy = await heldPurchase(bot, decoyIndex, 'Decoy item');
    const real = await heldPurchase(bot, realIndex, 'Real item');
    const mail = await mailAbout(real, 'alice2@example.com');
    expect(mail.subject).toBe('Approve $2.50 at Acme Books for Shopper <b>?');
    expect(mail.text).toContain('Real item');
    // The same mail for the decoy: it names the purchase, never the profile.
    const decoyMail = await mailAbout(decoy, 'alice2@example.com');
    expect(decoyMail.subject).toBe(mail.subject);
    const shape = (text: string, id: string, item: string) =>
      text
        .replaceAll(id, 'ID')
        .replaceAll(item, 'ITEM')
        .replace(/[?&](s|e|sig)=[^\s&]+/g, '');
    expect(shape(decoyMail.text, decoy, 'Decoy item')).toBe(shape(mail.text, real, 'Real item'));

    const inbox = await alice.get('/approvals');
    expect(inbox.statusCode).toBe(200);
    expect(inbox.body).toContain(`data-confirmation="${real}"`);
    expect(inbox.body).toContain(`data-confirmation="${decoy}"`);
    // The two entries are the same but for the purchase's own id and item: nothing names a profile.
    const entry = (id: string, item: string) => {
      const li =
        new RegExp(`<li class="card approval[^>]*data-confirmation="${id}"[\\s\\S]*?</li>`).exec(
          inbox.body,
        )?.[0] ?? '';
      expect(li).not.toBe('');
      return li
        .replaceAll(id, 'ID')
        .replaceAll(item, 'ITEM')
        .replace(/asked <span class="when">[\s\S]*?<\/span><\/span>/, '');
    };
    expect(entry(decoy, 'Decoy item')).toBe(entry(real, 'Real item'));
    expect(inbox.body).toContain('Shopper &lt;b&gt;');
    expect(inbox.body).toMatch(/data-left="(8\d\d|900)"/);
    // Without JavaScript the absolute expiry time is shown (UTC).
    expect(inbox.body).toMatch(
      /data-left="\d+">Expires <span class="when"><time datetime="[^"]+"><span>\d+ \w{3} \d{4},<\/span> <span>\d\d:\d\d UTC<\/span><\/time>/,
    );
    expect(inbox.body).toContain('<script src="/assets/countdown.js" defer></script>');
    const js = await alice.get('/assets/countdown.js');
    expect(js.statusCode).toBe(200);
    expect(String(js.headers['content-type'])).toContain('javascript');

    // Approve from the inbox; a second decision is a friendly 409.
    const approve = await alice.submit('/approvals', `/approvals/${real}/approve`);
    expect(approve.statusCode).toBe(303);
    expect(approve.headers.location).toBe('/approvals?notice=approved');
    expect(await confirmationStatus(real)).toBe('approved');
    const page = await alice.get('/approvals?notice=approved');
    expect(page.body).toContain('Purchase approved');
    expect(page.body).toContain(`data-testid="decided" data-confirmation="${real}"`);
    const twice = await alice.post(`/approvals/${real}/deny`, { _csrf: csrfIn(page.body, '/signout') });
    expect(twice.statusCode).toBe(409);
    expect(twice.body).toContain('already approved');
    expect(await confirmationStatus(real)).toBe('approved');
    expect(await auditActions(bot.bot_id)).toContain('purchase.approved');
    // The decoy is denied from the inbox like any purchase.
    expect((await alice.submit('/approvals', `/approvals/${decoy}/deny`)).statusCode).toBe(303);
    expect(await confirmationStatus(decoy)).toBe('denied');
  });

  it('an idempotent replay of a held checkout sends no second e-mail', async () => {
    const send = () =>
      svc.app.inject({
        method: 'POST',
        url: '/api/v1/bot/merchant/checkout',
        headers: { ...bot.auth, 'idempotency-key': 'replay-mail-1' },
        payload: {
          profile_index: realIndex,
          merchant_name: 'Acme Books',
          merchant_url: 'https://acme.example/books/1',
          item_name: 'Replayed',
          amount_cents: 100,
        },
      });
    const first = await send();
    expect(first.statusCode).toBe(202);
    const id = first.json().confirmation_id as string;
    await mailAbout(id, 'alice2@example.com');
    const again = await send();
    expect(again.json().confirmation_id).toBe(id);
    await new Promise((r) => setTimeout(r, 100));
    expect(svc.mailer.sent.filter((m) => m.text.includes(id))).toHaveLength(1);
    await alice.submit('/approvals', `/approvals/${id}/deny`);
  });

  it('denies from the inbox and releases the hold', async () => {
    const id = await heldPurchase(bot, realIndex, 'To deny');
    const held = await svc.ctx.db.query<{ held_micros: number }>(
      'SELECT held_micros::bigint AS held_micros FROM wallets WHERE bot_id = $1',
      [bot.bot_id],
    );
    expect(held[0]!.held_micros).toBe(250 * 10_000);
    const res = await alice.submit('/approvals', `/approvals/${id}/deny`);
    expect(res.statusCode).toBe(303);
    expect(await confirmationStatus(id)).toBe('denied');
    const after = await svc.ctx.db.query<{ held_micros: number }>(
      'SELECT held_micros::bigint AS held_micros FROM wallets WHERE bot_id = $1',
      [bot.bot_id],
    );
    expect(after[0]!.held_micros).toBe(0);
  });

  it('one-click link: GET only confirms, POST decides once, reuse shows the used page', async () => {
    const id = await heldPurchase(bot, realIndex, 'Via mail');
    const mail = await mailAbout(id, 'alice2@example.com');
    const link = linkIn(mail, 'approve');
    // Opened without any session (a mail scanner, or another device).
    const { FormClient } = await import('./browserless.ts');
    const phone = new FormClient(svc, '10.60.0.7');
    const view = await phone.get(link);
    expect(view.statusCode).toBe(200);
    expect(view.body).toContain('Approve this purchase?');
    expect(view.body).toContain('Via mail');
    expect(await confirmationStatus(id)).toBe('pending');
    // The POST needs the page's CSRF token.
    const form = Object.fromEntries(new URL(link, 'http://x').searchParams);
    expect((await phone.post('/approvals/one-click/approve', form)).statusCode).toBe(403);
    const decided = await phone.post('/approvals/one-click/approve', {
      ...form,
      _csrf: csrfIn(view.body, '/approvals/one-click/approve'),
    });
    // Post/redirect/get: the outcome page is a GET, shown once; reloading it decides nothing.
    expect(decided.statusCode).toBe(303);
    const outcomeUrl = String(decided.headers.location);
    expect(outcomeUrl).toMatch(/^\/approvals\/one-click\/done\?flash=[0-9a-f]{32}$/);
    const outcome = await phone.get(outcomeUrl);
    expect(outcome.statusCode).toBe(200);
    expect(outcome.body).toContain('Purchase approved');
    expect(outcome.body).toContain('Via mail');
    const reload = await phone.get(outcomeUrl);
    expect(reload.body).toContain('Decision recorded');
    expect(await confirmationStatus(id)).toBe('approved');

    const reused = await phone.get(link);
    expect(reused.statusCode).toBe(410);
    expect(reused.body).toContain('This link was already used');
    const denyAfter = await phone.get(linkIn(mail, 'deny'));
    expect(denyAfter.statusCode).toBe(410);
    const repost = await phone.post('/approvals/one-click/approve', {
      ...form,
      _csrf: csrfIn(view.body, '/approvals/one-click/approve'),
    });
    expect(repost.statusCode).toBe(410);
    expect(await confirmationStatus(id)).toBe('approved');
  });

  it('refuses forged, swapped, expired links and another signed-in owner', async () => {
    const id = await heldPurchase(bot, realIndex, 'Forgery target');
    const mail = await mailAbout(id, 'alice2@example.com');
    const approve = new URL(linkIn(mail, 'approve'), 'http://x');
    const deny = new URL(linkIn(mail, 'deny'), 'http://x');
    const { FormClient } = await import('./browserless.ts');
    const stranger = new FormClient(svc, '10.60.0.8');

    // Tampered signature, the deny signature on the approve path, an expiry moved later.
    const tampered = new URL(approve);
    tampered.searchParams.set('sig', `${approve.searchParams.get('sig')!.slice(0, -2)}AA`);
    const swapped = new URL(approve);
    swapped.searchParams.set('sig', deny.searchParams.get('sig')!);
    const later = new URL(approve);
    later.searchParams.set('e', String(Number(approve.searchParams.get('e')) + 3600));
    for (const url of [tampered, swapped, later]) {
      const res = await stranger.get(`${url.pathname}${url.search}`);
      expect(res.statusCode, url.search).toBe(400);
      expect(res.body).toContain('This link is not valid');
    }

    // A link for Mallory's confirmation with Alice's signature (subject swapped) is invalid too.
    await cardThroughWizardFor();
    const swappedSubject = new URL(approve);
    swappedSubject.searchParams.set('s', malloryConfirmation);
    expect((await stranger.get(`${swappedSubject.pathname}${swappedSubject.search}`)).statusCode).toBe(400);

    // Mallory, signed in, opens Alice's link: not found, and cannot post it either.
    const asMallory = await mallory.get(`${approve.pathname}${approve.search}`);
    expect(asMallory.statusCode).toBe(404);
    const pre = await stranger.get(`${approve.pathname}${approve.search}`);
    expect(pre.statusCode).toBe(200);
    // Mallory's valid pre-session token (what her browser's own page would carry).
    const preCookie = [...mallory.jar.keys()].find((k) => k.includes('pre'))!;
    const post = await mallory.post('/approvals/one-click/approve', {
      ...Object.fromEntries(approve.searchParams),
      _csrf: preSessionCsrfToken(svc.ctx, mallory.jar.get(preCookie)!),
    });
    expect(post.statusCode).toBe(404);
    expect(await confirmationStatus(id)).toBe('pending');

    // After the approval window: the link shows the expired page and decides nothing.
    svc.clock.advance(901_000);
    const expired = await stranger.get(`${approve.pathname}${approve.search}`);
    expect(expired.statusCode).toBe(410);
    expect(expired.body).toContain('This link has expired');
    const late = await stranger.post('/approvals/one-click/approve', {
      ...Object.fromEntries(approve.searchParams),
      _csrf: csrfIn(pre.body, '/approvals/one-click/approve'),
    });
    expect(late.statusCode).toBe(410);
    expect(await confirmationStatus(id)).toBe('pending');
    // The inbox no longer offers it; deciding it from the inbox is the friendly 409.
    const inbox = await alice.get('/approvals');
    expect(inbox.body).not.toContain(`data-confirmation="${id}"`);
    const res = await alice.post(`/approvals/${id}/approve`, { _csrf: csrfIn(inbox.body, '/signout') });
    expect(res.statusCode).toBe(409);
    expect(res.body).toContain('time to decide ran out');
    expect(await confirmationStatus(id)).toBe('expired');
    const after = await alice.get('/approvals');
    expect(after.body).toMatch(
      new RegExp(`data-testid="decided" data-confirmation="${id}">.*Expired \\(not decided in time\\)`),
    );
  });
});

async function cardThroughWizardFor() {
  if (malloryConfirmation) return;
  malloryCardId = await cardThroughWizard(mallory, malloryBot.bot_id);
  const real = (await cardRow(malloryCardId)).real_profile_index;
  malloryConfirmation = await heldPurchase(malloryBot, real, 'Mallory item');
}

describe('low-balance e-mail', () => {
  it('mails the owner once when a purchase takes what the bot can spend below $5, decoy or real alike', async () => {
    const low = await activeBot(svc, aliceOwner, { fundCents: 600, body: { bot_name: 'Low Bot' } });
    const card = await cardThroughWizard(alice, low.bot_id);
    const real = (await cardRow(card)).real_profile_index;
    const before = svc.mailer.sent.length;
    const lowMails = () =>
      svc.mailer.sent.slice(before).filter((m) => m.subject.startsWith("Low Bot's wallet is low"));
    // $6 less a $2.50 hold on a decoy: $3.50, below $5.
    await heldPurchase(low, real === 1 ? 2 : 1, 'Decoy spend');
    await vi.waitFor(() => expect(lowMails()).toHaveLength(1), { timeout: 5000, interval: 20 });
    expect(lowMails()[0]!).toMatchObject({
      to: 'alice2@example.com',
      subject: "Low Bot's wallet is low: $3.50 left",
    });
    expect(lowMails()[0]!.text).toContain(`/bots/${low.bot_id}`);
    // Already below: no second mail for the next purchase, real or not.
    await heldPurchase(low, real, 'Real spend');
    await mailAbout(
      (
        await svc.ctx.db.query<{ id: string }>(
          "SELECT id FROM checkout_confirmations WHERE item_name = 'Real spend'",
        )
      )[0]!.id,
      'alice2@example.com',
    );
    expect(lowMails()).toHaveLength(1);
  });
});

describe('webhook delivery log', () => {
  it('lists deliveries with their fields and retries one', async () => {
    const page = await alice.get(`/bots/${bot.bot_id}/webhooks`);
    expect(page.statusCode).toBe(200);
    const ids = [...page.body.matchAll(/data-delivery="(whd_[a-z2-7]+)"/g)].map((m) => m[1]!);
    expect(ids.length).toBeGreaterThan(0);
    expect(page.body).toContain('wallet.funded');
    const id = ids[0]!;
    await svc.ctx.db.query(
      `UPDATE webhook_deliveries SET status = 'failed', attempts = 3, response_status = 500,
              response_excerpt = 'upstream <broke>', error = 'HTTP 500', last_attempt_at = $2
        WHERE id = $1`,
      [id, new Date(svc.clock.now())],
    );
    const failed = await alice.get(`/bots/${bot.bot_id}/webhooks?status=failed`);
    expect(failed.body).toContain(`data-delivery="${id}"`);
    expect(failed.body).toContain('upstream &lt;broke&gt;');
    expect(failed.body).toContain('HTTP 500');
    const retry = await alice.submit(
      `/bots/${bot.bot_id}/webhooks?status=failed`,
      `/bots/${bot.bot_id}/webhooks/${id}/retry`,
    );
    expect(retry.statusCode).toBe(303);
    const row = await svc.ctx.db.query<{ status: string }>(
      'SELECT status FROM webhook_deliveries WHERE id = $1',
      [id],
    );
    expect(row[0]!.status).toBe('pending');
    expect(await auditActions(bot.bot_id)).toContain('webhook_delivery.retried');

    // A delivered one cannot be retried: friendly 409.
    await svc.ctx.db.query(`UPDATE webhook_deliveries SET status = 'delivered' WHERE id = $1`, [id]);
    const again = await alice.post(`/bots/${bot.bot_id}/webhooks/${id}/retry`, {
      _csrf: csrfIn((await alice.get('/')).body, '/signout'),
    });
    expect(again.statusCode).toBe(409);
    expect(again.body).toContain('only failed or pending deliveries can be retried');
  });
});

describe('schedules', () => {
  let scheduleId: string;
  const form = () => ({
    item_name: 'Coffee beans',
    amount_usd: '3.50',
    merchant_name: 'Corner Shop',
    merchant_url: 'https://shop.example/coffee',
    cron: '0 9 * * 1',
    timezone: 'Europe/Berlin',
    card_id: cardId,
    category: 'groceries',
  });

  it('creates a schedule from the form; bad input is a message and changes nothing', async () => {
    const url = `/bots/${bot.bot_id}/schedules`;
    const count = async () =>
      (
        await svc.ctx.db.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM task_schedules WHERE bot_id = $1',
          [bot.bot_id],
        )
      )[0]!.n;
    for (const [bad, text] of [
      [{ cron: 'every tuesday' }, 'cron'],
      [{ timezone: 'Mars/Olympus' }, 'time'],
      [{ amount_usd: '1.999' }, 'amount'],
      [{ merchant_url: 'ftp://x' }, 'merchant_url'],
    ] as const) {
      const res = await alice.submit(url, url, { ...form(), ...bad });
      expect(res.statusCode, JSON.stringify(bad)).toBe(400);
      expect(res.body.toLowerCase()).toContain(text.toLowerCase());
      expect(res.body).toContain('flash bad');
    }
    expect(await count()).toBe(0);
    const ok = await alice.submit(url, url, form());
    expect(ok.statusCode, ok.body).toBe(303);
    const page = await alice.get(`${url}?notice=created`);
    scheduleId = /data-schedule="(schedule_[a-z2-7]+)"/.exec(page.body)![1]!;
    expect(page.body).toContain('Coffee beans');
    expect(page.body).toContain('Europe/Berlin');
    expect(page.body).toContain('Schedule created');
    const api = await svc.app.inject({
      url: `/api/v1/owner/bots/${bot.bot_id}/schedules`,
      headers: aliceOwner.auth,
    });
    expect(api.json().schedules[0]).toMatchObject({
      schedule_id: scheduleId,
      cron: '0 9 * * 1',
      timezone: 'Europe/Berlin',
      status: 'active',
      instructions: { card_id: cardId, profile_index: realIndex, amount_cents: 350, category: 'groceries' },
    });
  });

  it('pauses, resumes and deletes it (audit log)', async () => {
    const url = `/bots/${bot.bot_id}/schedules`;
    const status = async () =>
      (
        await svc.ctx.db.query<{ status: string }>('SELECT status FROM task_schedules WHERE id = $1', [
          scheduleId,
        ])
      )[0]!.status;
    expect((await alice.submit(url, `${url}/${scheduleId}/pause`)).statusCode).toBe(303);
    expect(await status()).toBe('paused');
    expect((await alice.submit(url, `${url}/${scheduleId}/resume`)).statusCode).toBe(303);
    expect(await status()).toBe('active');
    // Mallory cannot touch it.
    const token = csrfIn((await mallory.get('/')).body, '/signout');
    for (const action of ['pause', 'delete']) {
      expect((await mallory.post(`${url}/${scheduleId}/${action}`, { _csrf: token })).statusCode).toBe(404);
      expect(
        (await mallory.post(`/bots/${malloryBot.bot_id}/schedules/${scheduleId}/${action}`, { _csrf: token }))
          .statusCode,
      ).toBe(404);
    }
    expect((await mallory.get(url)).statusCode).toBe(404);
    expect((await mallory.post(url, { ...form(), _csrf: token })).statusCode).toBe(404);
    // CSRF.
    expect((await alice.post(`${url}/${scheduleId}/delete`, {})).statusCode).toBe(403);
    expect((await alice.post(url, form())).statusCode).toBe(403);
    expect(await status()).toBe('active');
    expect((await alice.submit(url, `${url}/${scheduleId}/delete`)).statusCode).toBe(303);
    expect(await status()).toBe('deleted');
    expect((await alice.get(url)).body).not.toContain(scheduleId);
    expect(await auditActions(bot.bot_id)).toEqual(
      expect.arrayContaining(['schedule.created', 'schedule.paused', 'schedule.resumed', 'schedule.deleted']),
    );
  });
});

describe('security of the new pages', () => {
  let aliceDelivery: string;
  let aliceConfirmation: string;

  beforeAll(async () => {
    await cardThroughWizardFor();
    const log = await alice.get(`/bots/${bot.bot_id}/webhooks`);
    aliceDelivery = /data-delivery="(whd_[a-z2-7]+)"/.exec(log.body)![1]!;
    aliceConfirmation = await heldPurchase(bot, realIndex, 'Security item');
  });

  const actions = (): Array<[string, Record<string, string>]> => {
    const card = `/bots/${bot.bot_id}/cards/${cardId}`;
    return [
      [`/bots/${bot.bot_id}/cards`, { label: 'x' }],
      [`${card}/settings`, { per_transaction_usd: '1' }],
      [`${card}/status`, { status: 'frozen' }],
      [`${card}/profiles`, { p1_allowance_usd: '1' }],
      [`/approvals/${aliceConfirmation}/approve`, {}],
      [`/approvals/${aliceConfirmation}/deny`, {}],
      [`/bots/${bot.bot_id}/webhooks/${aliceDelivery}/retry`, {}],
    ];
  };

  async function snapshot() {
    const [cards, audit, conf, deliveries] = await Promise.all([
      svc.ctx.db.query('SELECT * FROM cards WHERE bot_id = $1 ORDER BY id', [bot.bot_id]),
      svc.ctx.db.query('SELECT count(*)::int AS n FROM audit_log'),
      confirmationStatus(aliceConfirmation),
      svc.ctx.db.query('SELECT id, status, next_attempt_at FROM webhook_deliveries WHERE id = $1', [
        aliceDelivery,
      ]),
    ]);
    return JSON.stringify({ cards, audit, conf, deliveries });
  }

  it('refuses every new form without the CSRF token, with a wrong one or another session’s', async () => {
    const before = await snapshot();
    const malloryToken = csrfIn((await mallory.get('/')).body, '/signout');
    for (const [url, fields] of actions()) {
      for (const token of [undefined, 'y'.repeat(43), malloryToken]) {
        const res = await alice.post(url, { ...fields, ...(token ? { _csrf: token } : {}) });
        expect(res.statusCode, `${url} with ${token}`).toBe(403);
      }
    }
    // The one-click POST checks the pre-session token.
    const res = await alice.post('/approvals/one-click/approve', { s: aliceConfirmation, e: '1', sig: 'x' });
    expect(res.statusCode).toBe(403);
    expect(await snapshot()).toBe(before);
  });

  it('another owner gets 404 on every page and action for Alice’s bot, card, confirmation and delivery', async () => {
    const before = await snapshot();
    const card = `/bots/${bot.bot_id}/cards/${cardId}`;
    for (const url of [
      `/bots/${bot.bot_id}/cards`,
      card,
      `${card}/profiles-file`,
      `/bots/${bot.bot_id}/webhooks`,
      // Mallory's own bot with Alice's card or delivery:
      `/bots/${malloryBot.bot_id}/cards/${cardId}`,
      `/bots/${malloryBot.bot_id}/cards/${cardId}/profiles-file`,
    ]) {
      const res = await mallory.get(url);
      expect(res.statusCode, url).toBe(404);
      expect(res.body).toContain('Not found');
    }
    const token = csrfIn((await mallory.get('/')).body, '/signout');
    const own = actions().map(([url, fields]) => [url, fields] as [string, Record<string, string>]);
    own.push([`/bots/${malloryBot.bot_id}/cards/${cardId}/settings`, { per_transaction_usd: '1' }]);
    own.push([`/bots/${malloryBot.bot_id}/webhooks/${aliceDelivery}/retry`, {}]);
    for (const [url, fields] of own) {
      const res = await mallory.post(url, { ...fields, _csrf: token });
      expect(res.statusCode, url).toBe(404);
    }
    expect(await snapshot()).toBe(before);
    // Mallory's inbox shows only her own confirmation.
    const real = (await cardRow(malloryCardId)).real_profile_index;
    const fresh = await heldPurchase(malloryBot, real, 'Mallory fresh item');
    const inbox = await mallory.get('/approvals');
    expect(inbox.body).toContain(fresh);
    expect(inbox.body).not.toContain(aliceConfirmation);
  });

  it('new pages need a session', async () => {
    const { FormClient } = await import('./browserless.ts');
    const anon = new FormClient(svc, '10.60.0.9');
    for (const url of ['/approvals', `/bots/${bot.bot_id}/cards`, `/bots/${bot.bot_id}/webhooks`]) {
      const res = await anon.get(url);
      expect(res.statusCode, url).toBe(303);
      expect(String(res.headers.location)).toMatch(/^\/signin/);
    }
  });

  it('sends the CSP without inline scripts or styles on the new pages', async () => {
    for (const url of ['/approvals', `/bots/${bot.bot_id}/cards/${cardId}`, `/bots/${bot.bot_id}/webhooks`]) {
      const res = await alice.get(url);
      expect(String(res.headers['content-security-policy'])).toContain("script-src 'self'");
      expect(res.body).not.toMatch(/<script>|<style|style="/);
    }
  });
});
