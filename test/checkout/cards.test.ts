import { splitCard } from '../support/cards.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLuhnValid } from '../../src/cards/decoys.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';
import { DIGITS } from './helpers.ts';

describe('owner card API: split-knowledge cards and profiles', () => {
  let svc: TestService;
  let owner: TestOwner;
  beforeAll(async () => {
    svc = await createTestService();
    owner = await createOwner(svc);
  });
  afterAll(async () => {
    await svc.close();
  });

  function req(
    method: 'GET' | 'POST' | 'PATCH' | 'PUT',
    url: string,
    payload?: unknown,
    o: TestOwner = owner,
  ) {
    return svc.app.inject({
      method,
      url,
      headers: o.auth,
      ...(payload === undefined ? {} : { payload: payload as object }),
    });
  }

  it('starts a card with a random real profile and three consecutive missing positions', async () => {
    const bot = await activeBot(svc, owner);
    const seen = new Set<number>();
    for (let i = 0; i < 12; i++) {
      const res = await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {});
      expect(res.statusCode).toBe(201);
      const card = res.json();
      expect(card.card_id).toMatch(/^card_/);
      expect(card.real_profile_index).toBeGreaterThanOrEqual(1);
      expect(card.real_profile_index).toBeLessThanOrEqual(6);
      const [a, b, c] = card.missing_digit_positions;
      expect([b - a, c - b]).toEqual([1, 1]);
      expect(a).toBeGreaterThanOrEqual(0);
      expect(c).toBeLessThanOrEqual(15);
      seen.add(card.real_profile_index);
    }
    expect(seen.size).toBeGreaterThan(1);
  });

  it('activates with per-profile digits only; bad triples, Luhn, BIN and expiry are 400 and store nothing', async () => {
    const bot = await activeBot(svc, owner);
    const card = (await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, { label: 'Visa' })).json();
    expect(card).toMatchObject({ bot_id: bot.bot_id, status: 'pending_activation' });
    const base = `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}`;
    const { activation, file, number } = splitCard(card);
    const withProfile = (i: number, change: Record<string, unknown>) => ({
      ...activation,
      profiles: activation.profiles.map((p) => (p.profile_index === i ? { ...p, ...change } : p)),
    });
    const bad: Array<[string, unknown]> = [
      ['old format', { missing_digits: DIGITS, expiry_month: '09', expiry_year: '2030' }],
      ['2 digits', withProfile(2, { missing_digits: '12' })],
      ['letters', withProfile(3, { missing_digits: '1a3' })],
      ['4 digits', withProfile(3, { missing_digits: '1234' })],
      [
        'Luhn-invalid result',
        withProfile(4, { visible_luhn: (activation.profiles[3]!.visible_luhn + 1) % 10 }),
      ],
      ['five profiles', { ...activation, profiles: activation.profiles.slice(0, 5) }],
      ['duplicate index', withProfile(2, { profile_index: 1 })],
      ['BIN of another length (Amex is 15)', { ...activation, bin: '371449' }],
      ['unknown BIN', { ...activation, bin: '000000' }],
      ['BIN with a letter', { ...activation, bin: '45320x' }],
      ['full number as BIN', { ...activation, bin: number }],
      ['expired', { ...activation, expiry_month: '01', expiry_year: '2025' }],
      ['extra field (the number)', { ...activation, card_number: number }],
    ];
    for (const [what, body] of bad) {
      const res = await req('POST', `${base}/activate`, body);
      expect(res.statusCode, what).toBe(400);
      expect(res.json().error, what).toBe('validation_error');
      expect(res.json().message.length, what).toBeGreaterThan(10);
    }
    const pending = await svc.ctx.db.query<{ status: string; profiles_enc: string | null }>(
      'SELECT status, profiles_enc FROM cards WHERE id = $1',
      [card.card_id],
    );
    expect(pending[0]).toEqual({ status: 'pending_activation', profiles_enc: null });

    const act = await req('POST', `${base}/activate`, activation);
    expect(act.statusCode, act.body).toBe(200);
    expect(act.json()).toMatchObject({ status: 'active', card_id: card.card_id });
    // Timestamps are left out: their milliseconds may spell the digits by chance.
    expect(act.body.replace(/\d{4}-\d{2}-\d{2}T[\d:.]+Z/g, '<time>')).not.toContain(DIGITS);
    expect((await req('POST', `${base}/activate`, activation)).statusCode).toBe(409);
    const stored = await svc.ctx.db.query<{ profiles_enc: string; secret_enc: string | null }>(
      'SELECT profiles_enc, secret_enc FROM cards WHERE id = $1',
      [card.card_id],
    );
    expect(stored[0]!.secret_enc).toBeNull();
    // Sealed (version, nonce, ciphertext, tag), not the profiles in clear. (Looking for the digits in the
    // ciphertext's base64 text would fail by chance about once in a few hundred runs.)
    expect(stored[0]!.profiles_enc).toMatch(/^v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    // The service holds no profiles file for a format-2 card: it was built where the number was typed.
    expect((await req('GET', `${base}/profiles-file`)).statusCode).toBe(409);
    // The file: six profiles sharing prefix, length, holder and address; each Luhn-valid once completed.
    expect(file.profiles.map((p) => p.profile_index)).toEqual([1, 2, 3, 4, 5, 6]);
    for (const p of file.profiles) {
      expect(p.card_number.slice(0, 8)).toBe(number.slice(0, 8));
      expect(p.card_number).toHaveLength(number.length);
      expect(p.cardholder_name).toBe(file.profiles[0]!.cardholder_name);
      expect(p.billing_address).toEqual(file.profiles[0]!.billing_address);
      const digits = activation.profiles.find((x) => x.profile_index === p.profile_index)!.missing_digits;
      expect(isLuhnValid(p.card_number.replace('***', digits))).toBe(true);
    }
    expect(
      file.profiles
        .find((p) => p.profile_index === card.real_profile_index)!
        .card_number.replace('***', DIGITS),
    ).toBe(number);
    expect(svc.logs()).not.toContain(`"missing_digits":"${DIGITS}"`);
  });

  it('updates guardrails, approval mode, status and profiles; the bot detail lists its cards', async () => {
    const bot = await activeBot(svc, owner);
    const card = (await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {})).json();
    const base = `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}`;
    const early = await req('PATCH', base, { status: 'active' });
    expect(early.statusCode).toBe(409);
    expect(
      (await req('POST', `${base}/activate`, { ...splitCard(card).activation, different_card: true }))
        .statusCode,
    ).toBe(200);
    const patched = await req('PATCH', base, {
      per_transaction_cents: 1500,
      daily_cents: 3000,
      monthly_cents: 9000,
      approval_mode: 'auto_approve_by_category',
      approved_categories: ['Food'],
      status: 'frozen',
    });
    expect(patched.statusCode).toBe(200);
    expect(patched.json()).toMatchObject({
      status: 'frozen',
      guardrails: { per_transaction_usd: 15, daily_usd: 30, monthly_usd: 90 },
      approval_mode: 'auto_approve_by_category',
      approved_categories: ['food'],
    });
    for (const body of [
      {},
      { approval_mode: 'yes' },
      { daily_cents: -1 },
      { status: 'deleted' },
      { unknown: 1 },
    ]) {
      expect((await req('PATCH', base, body)).statusCode, JSON.stringify(body)).toBe(400);
    }
    const profile = await req('PUT', `${base}/profiles/3`, {
      allowance_cents: 2500,
      allowance_window: 'month',
      approval_rule: 'auto_approve_under_threshold',
      approval_threshold_cents: 200,
    });
    expect(profile.statusCode).toBe(200);
    expect(profile.json()).toMatchObject({ profile_index: 3, allowance_usd: 25, allowance_window: 'month' });
    expect((await req('PUT', `${base}/profiles/7`, { allowance_cents: 1 })).statusCode).toBe(400);
    expect((await req('PUT', `${base}/profiles/2`, { allowance_window: 'year' })).statusCode).toBe(400);
    const one = await req('GET', base);
    expect(one.json().profiles).toHaveLength(6);
    const detail = await req('GET', `/api/v1/owner/bots/${bot.bot_id}`);
    expect(detail.json().cards.map((c: { card_id: string }) => c.card_id)).toContain(card.card_id);
  });

  it("401 without a token; another owner's bot or card is 404", async () => {
    const bot = await activeBot(svc, owner);
    const card = (await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {})).json();
    const base = `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}`;
    expect(
      (await svc.app.inject({ method: 'POST', url: `/api/v1/owner/bots/${bot.bot_id}/cards` })).statusCode,
    ).toBe(401);
    expect((await svc.app.inject({ url: `${base}/profiles-file` })).statusCode).toBe(401);
    const stranger = await createOwner(svc);
    expect((await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {}, stranger)).statusCode).toBe(404);
    expect((await req('GET', `${base}/profiles-file`, undefined, stranger)).statusCode).toBe(404);
    expect((await req('POST', `${base}/activate`, splitCard(card).activation, stranger)).statusCode).toBe(
      404,
    );
    expect((await req('PATCH', base, { daily_cents: 1 }, stranger)).statusCode).toBe(404);
    expect((await req('PUT', `${base}/profiles/1`, { allowance_cents: 1 }, stranger)).statusCode).toBe(404);
    // A card of another bot under this bot's path is 404 too.
    const other = await activeBot(svc, owner);
    expect(
      (await req('GET', `/api/v1/owner/bots/${other.bot_id}/cards/${card.card_id}/profiles-file`)).statusCode,
    ).toBe(404);
  });

  it('every card and checkout route is in the OpenAPI document', async () => {
    const doc = (await svc.app.inject({ url: '/openapi.json' })).json();
    for (const path of [
      '/api/v1/owner/bots/{bot_id}/cards',
      '/api/v1/owner/bots/{bot_id}/cards/{card_id}',
      '/api/v1/owner/bots/{bot_id}/cards/{card_id}/activate',
      '/api/v1/owner/bots/{bot_id}/cards/{card_id}/profiles-file',
      '/api/v1/owner/bots/{bot_id}/cards/{card_id}/profiles/{profile_index}',
      '/api/v1/owner/approvals',
      '/api/v1/owner/approvals/{confirmation_id}/approve',
      '/api/v1/owner/approvals/{confirmation_id}/deny',
      '/api/v1/bot/merchant/checkout',
      '/api/v1/bot/merchant/checkout/status',
    ]) {
      expect(doc.paths[path], path).toBeDefined();
    }
  });
});
