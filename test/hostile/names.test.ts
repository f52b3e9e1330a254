import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { plainText } from '../../src/platform/text.ts';
import { signIn } from '../dashboard/browserless.ts';
import { activeBot, createOwner, createTestService, nextIp, type TestService } from '../support/service.ts';

// Issue 33, item 5: display names (bot names and descriptions, card labels, owner token names) are
// one plain, visible line wherever they enter: an unpaired surrogate is refused (400 naming the
// field); bidi controls and zero-width characters are removed; line breaks become spaces. What is
// stored is what the dashboard, the mails and the audit log show. The service has no bot rename:
// a name enters at registration only.

const RLO = '\u202E'; // right-to-left override
const LRI = '\u2066'; // left-to-right isolate
const PDI = '\u2069';
const ZWSP = '\u200B';
const ZWNJ = '\u200C';
const WJ = '\u2060';
const BOM = '\uFEFF';

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService({ env: { REGISTRATION_RATE_LIMIT_PER_HOUR: '1000' } });
});
afterAll(async () => {
  await svc.close();
});

const register = (body: Record<string, unknown>) =>
  svc.app.inject({
    method: 'POST',
    url: '/api/v1/bots/register',
    remoteAddress: nextIp(),
    payload: { owner_email: 'names@example.com', callback_url: 'http://127.0.0.1:9/h', ...body },
  });

describe('display names', () => {
  it('plainText: bidi controls and zero-width characters removed, line breaks spaced, emoji joins kept', () => {
    expect(plainText(`Pay${RLO}roll${ZWSP} ${LRI}Bot${PDI}\r\nTwo\u2028Three${WJ}${BOM}`)).toBe(
      'Payroll Bot Two Three',
    );
    expect(plainText(`a${ZWNJ}b\u00ADc\u200Ed\u200Fe\u061Cf`)).toBe('abcdef');
    expect(plainText('👩\u200D👩\u200D👧 team')).toBe('👩\u200D👩\u200D👧 team');
    expect(plainText('A\u0301')).toBe('\u00C1'); // NFC
  });

  it('registration: the stored name is the visible one; a lone surrogate or nothing visible is 400', async () => {
    const res = await register({
      bot_name: `Pay${RLO}roll${ZWSP} Bot\r\nBcc: x@example.com`,
      description: `does ${LRI}things${PDI}\nwell`,
    });
    expect(res.statusCode, res.body).toBe(201);
    const [row] = await svc.ctx.db.query<{ name: string; description: string }>(
      'SELECT name, description FROM bots WHERE id = $1',
      [res.json().bot_id],
    );
    expect(row).toEqual({ name: 'Payroll Bot Bcc: x@example.com', description: 'does things well' });
    const mail = svc.mailer.sent.at(-1)!;
    expect(mail.subject).toBe('Claim your bot "Payroll Bot Bcc: x@example.com"');
    expect(mail.subject + mail.text).not.toMatch(/[\u202A-\u202E\u2066-\u2069\u200B\r]/);

    for (const [body, field] of [
      [{ bot_name: 'lone \uD800 surrogate' }, 'bot_name'],
      [{ bot_name: 'trailing \uDC00' }, 'bot_name'],
      [{ bot_name: `${ZWSP}${RLO}${BOM}` }, 'bot_name'],
      [{ bot_name: 'ok', description: 'bad \uDBFF' }, 'description'],
    ] as const) {
      const refused = await register(body);
      expect(refused.statusCode, JSON.stringify(body)).toBe(400);
      expect(refused.json()).toMatchObject({ error: 'validation_error', field });
    }
    // A look-alike with invisible characters is the same name: a duplicate.
    const again = await register({ bot_name: `Payroll${WJ} Bot Bcc: x@example.com` });
    expect(again.statusCode).toBe(409);
  });

  it('card labels, through the API and the dashboard form; token names', async () => {
    const owner = await createOwner(svc, 'labels@example.com');
    const bot = await activeBot(svc, owner);
    const api = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/cards`,
      headers: owner.auth,
      payload: { label: `Travel${RLO} card${ZWSP}\n2` },
    });
    expect(api.statusCode, api.body).toBe(201);
    const surrogate = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/cards`,
      headers: owner.auth,
      payload: { label: 'x\uD83D' },
    });
    expect(surrogate.json()).toMatchObject({ error: 'validation_error', field: 'label' });

    const browser = await signIn(svc, 'labels@example.com', '10.61.0.1');
    const form = await browser.submit(`/bots/${bot.bot_id}/cards`, `/bots/${bot.bot_id}/cards`, {
      label: `${LRI}Groceries${PDI}${ZWNJ}`,
    });
    expect(form.statusCode).toBe(303);
    const labels = await svc.ctx.db.query<{ label: string }>(
      'SELECT label FROM cards WHERE bot_id = $1 ORDER BY created_at, id',
      [bot.bot_id],
    );
    expect(labels.map((l) => l.label).sort()).toEqual(['Groceries', 'Travel card 2']);
    const page = await browser.get(`/bots/${bot.bot_id}/cards`);
    expect(page.body).not.toMatch(/[\u202A-\u202E\u2066-\u2069\u200B\u200C]/);

    const token = await browser.submit('/settings', '/settings/tokens', { name: `CI${RLO} box${ZWSP}` });
    expect(token.statusCode).toBe(303);
    const apiToken = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/owner/tokens',
      headers: { cookie: browser.cookieHeader(), 'x-csrf-token': csrfOf(page.body) },
      payload: { name: 'bad \uDFFF' },
    });
    expect(apiToken.statusCode, apiToken.body).toBe(400);
    expect(apiToken.json()).toMatchObject({ error: 'validation_error', field: 'name' });
    const audit = await svc.ctx.db.query<{ details: { name?: string } }>(
      `SELECT details FROM audit_log WHERE owner_id = $1 AND action = 'owner.token_created'`,
      [owner.id],
    );
    expect(audit.map((a) => a.details.name)).toEqual(['CI box']);
  });
});

function csrfOf(html: string): string {
  return /data-csrf="([^"]+)"/.exec(html)?.[1] ?? /name="_csrf" value="([^"]+)"/.exec(html)?.[1] ?? '';
}
