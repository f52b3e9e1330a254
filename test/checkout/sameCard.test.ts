import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { splitCard } from '../support/cards.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';
import { checkout, poll, purchase, setupCard } from './helpers.ts';

// One card number, one set of profiles (docs/security.md): a card added again — to another bot, or
// after the first was frozen — shares the first card's profiles (same_card_as), and an activation
// that looks like a card the owner already added is refused until the owner says it is another card.

let svc: TestService;
let owner: TestOwner;

beforeAll(async () => {
  svc = await createTestService({ env: { CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
  owner = await createOwner(svc);
});
afterAll(async () => {
  await svc.close();
});

const req = (method: 'GET' | 'POST' | 'PATCH', url: string, payload?: object, o: TestOwner = owner) =>
  svc.app.inject({ method, url, headers: o.auth, ...(payload === undefined ? {} : { payload }) });

async function cardRows(botId: string) {
  return svc.ctx.db.query<Record<string, unknown>>(
    'SELECT id, status, real_profile_index, missing_position, profiles_enc, card_length, same_card_as FROM cards WHERE bot_id = $1 ORDER BY created_at',
    [botId],
  );
}

describe('same_card_as', () => {
  it('gives a card on another bot the very same profiles: active at once, the same digits and expiries on every profile', async () => {
    const a = await activeBot(svc, owner, { fundCents: 10_000 });
    const first = await setupCard(svc, owner, a.bot_id, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 1000,
    });
    const b = await activeBot(svc, owner, { fundCents: 10_000 });
    const res = await req('POST', `/api/v1/owner/bots/${b.bot_id}/cards`, {
      label: 'same',
      same_card_as: first.card_id,
    });
    expect(res.statusCode, res.body).toBe(201);
    const second = res.json();
    expect(second).toMatchObject({
      status: 'active',
      real_profile_index: first.real_profile_index,
      missing_digit_positions: first.missing_digit_positions,
      same_card_as: first.card_id,
    });
    const [rowA] = await cardRows(a.bot_id);
    const [rowB] = await cardRows(b.bot_id);
    expect(rowB?.profiles_enc).toBe(rowA?.profiles_enc);
    expect(rowB?.card_length).toBe(rowA?.card_length);
    // A copy of a copy points at the first card.
    const c = await activeBot(svc, owner, { fundCents: 10_000 });
    const third = (
      await req('POST', `/api/v1/owner/bots/${c.bot_id}/cards`, { same_card_as: second.card_id })
    ).json();
    expect(third.same_card_as).toBe(first.card_id);
    // Approved purchases on each profile give the same digits and expiry on both bots.
    await req('PATCH', `/api/v1/owner/bots/${b.bot_id}/cards/${second.card_id}`, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 1000,
    });
    for (let profile = 1; profile <= 6; profile++) {
      const onA = await checkout(svc, a, purchase(profile, 100));
      const onB = await checkout(svc, b, purchase(profile, 100));
      expect(onA.statusCode, onA.body).toBe(200);
      expect(onB.statusCode, onB.body).toBe(200);
      const pick = (x: Record<string, unknown>) => [x.missing_digits, x.expiry_month, x.expiry_year];
      expect(pick(onB.json())).toEqual(pick(onA.json()));
    }
    const detail = (await req('GET', `/api/v1/owner/bots/${b.bot_id}/cards/${second.card_id}`)).json();
    expect(detail).toMatchObject({
      status: 'active',
      same_card_as: first.card_id,
      legacy_profiles_file: false,
    });
  });

  it("refuses what is not the owner's activated card, and changes nothing", async () => {
    const bot = await activeBot(svc, owner);
    const stranger = await createOwner(svc);
    const theirs = await activeBot(svc, stranger);
    const theirCard = await setupCard(svc, stranger, theirs.bot_id);
    // Another owner's card: its digits must never be copied (404, as an unknown one).
    const foreign = await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {
      same_card_as: theirCard.card_id,
    });
    expect(foreign.statusCode).toBe(404);
    expect(foreign.json()).toMatchObject({ error: 'card_not_found', field: 'same_card_as' });
    const unknown = await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {
      same_card_as: 'card_aaaaaaaaaaaaaaaa',
    });
    expect(unknown.statusCode).toBe(404);
    const malformed = await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {
      same_card_as: 'x; drop table cards',
    });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().error).toBe('validation_error');
    const pending = (await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {})).json();
    const fromPending = await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {
      same_card_as: pending.card_id,
    });
    expect(fromPending.statusCode).toBe(409);
    // Only the one pending card exists; nothing else was written.
    expect((await cardRows(bot.bot_id)).map((r) => r.status)).toEqual(['pending_activation']);
    // The other owner cannot make their pending card take this owner's profiles either.
    const mine = await setupCard(svc, owner, bot.bot_id);
    const theirPending = (
      await req('POST', `/api/v1/owner/bots/${theirs.bot_id}/cards`, {}, stranger)
    ).json();
    const steal = await req(
      'POST',
      `/api/v1/owner/bots/${theirs.bot_id}/cards/${theirPending.card_id}/same-card`,
      { same_card_as: mine.card_id },
      stranger,
    );
    expect(steal.statusCode).toBe(404);
    const [row] = await svc.ctx.db.query<{ profiles_enc: string | null }>(
      'SELECT profiles_enc FROM cards WHERE id = $1',
      [theirPending.card_id],
    );
    expect(row?.profiles_enc).toBeNull();
  });

  it('an activation that looks like a card already added (same length and expiry) is 409 possible_same_card until confirmed', async () => {
    const o = await createOwner(svc);
    const a = await activeBot(svc, o);
    const b = await activeBot(svc, o);
    const startA = (
      await req('POST', `/api/v1/owner/bots/${a.bot_id}/cards`, { label: 'Visa 42' }, o)
    ).json();
    const actA = await req(
      'POST',
      `/api/v1/owner/bots/${a.bot_id}/cards/${startA.card_id}/activate`,
      splitCard(startA).activation,
      o,
    );
    expect(actA.statusCode, actA.body).toBe(200);
    const startB = (await req('POST', `/api/v1/owner/bots/${b.bot_id}/cards`, {}, o)).json();
    const split = splitCard(startB);
    const refused = await req(
      'POST',
      `/api/v1/owner/bots/${b.bot_id}/cards/${startB.card_id}/activate`,
      split.activation,
      o,
    );
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toMatchObject({
      error: 'possible_same_card',
      card_id: startA.card_id,
      bot_id: a.bot_id,
      label: 'Visa 42',
    });
    expect(refused.json().message).toContain('same_card_as');
    expect((await cardRows(b.bot_id))[0]?.status).toBe('pending_activation');
    // Another expiry resembles nothing.
    const other = splitCard(startB, { expiry: { expiry_month: '03', expiry_year: '2031' } });
    const startC = (await req('POST', `/api/v1/owner/bots/${b.bot_id}/cards`, {}, o)).json();
    const differentExpiry = await req(
      'POST',
      `/api/v1/owner/bots/${b.bot_id}/cards/${startC.card_id}/activate`,
      splitCard(startC, { expiry: { expiry_month: '03', expiry_year: '2031' } }).activation,
      o,
    );
    expect(differentExpiry.statusCode, differentExpiry.body).toBe(200);
    expect(other.activation.expiry_month).toBe('03');
    // The owner says it is another card.
    const confirmed = await req(
      'POST',
      `/api/v1/owner/bots/${b.bot_id}/cards/${startB.card_id}/activate`,
      { ...split.activation, different_card: true },
      o,
    );
    expect(confirmed.statusCode, confirmed.body).toBe(200);
  });

  it('the same card: a pending card takes the profiles of the card it resembles (…/same-card)', async () => {
    const o = await createOwner(svc);
    const a = await activeBot(svc, o);
    const b = await activeBot(svc, o);
    const first = await setupCard(svc, o, a.bot_id);
    const pending = (await req('POST', `/api/v1/owner/bots/${b.bot_id}/cards`, {}, o)).json();
    const res = await req(
      'POST',
      `/api/v1/owner/bots/${b.bot_id}/cards/${pending.card_id}/same-card`,
      { same_card_as: first.card_id },
      o,
    );
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({
      card_id: pending.card_id,
      status: 'active',
      real_profile_index: first.real_profile_index,
      missing_digit_positions: first.missing_digit_positions,
      same_card_as: first.card_id,
    });
    const again = await req(
      'POST',
      `/api/v1/owner/bots/${b.bot_id}/cards/${pending.card_id}/same-card`,
      { same_card_as: first.card_id },
      o,
    );
    expect(again.statusCode).toBe(409);
    const self = (await req('POST', `/api/v1/owner/bots/${b.bot_id}/cards`, {}, o)).json();
    const ownSelf = await req(
      'POST',
      `/api/v1/owner/bots/${b.bot_id}/cards/${self.card_id}/same-card`,
      { same_card_as: self.card_id },
      o,
    );
    expect(ownSelf.statusCode).toBe(409);
    const audit = await svc.ctx.db.query<{ action: string; details: Record<string, unknown> }>(
      `SELECT action, details FROM audit_log WHERE bot_id = $1 ORDER BY created_at, id`,
      [b.bot_id],
    );
    expect(audit.map((r) => r.action)).toContain('card.activated');
  });

  it('a legacy card added again keeps its real profile and hidden positions; the owner builds a new file for them', async () => {
    const o = await createOwner(svc);
    const bot = await activeBot(svc, o, { fundCents: 5000 });
    // A card activated before format 2 (service-built decoys; the real secret in secret_enc).
    const legacyId = 'card_legacylegacylegacy';
    await svc.ctx.db.query(
      `INSERT INTO cards (id, bot_id, label, status, real_profile_index, missing_position, secret_enc, created_at, activated_at)
       VALUES ($1, $2, 'old', 'active', 4, 9, $3, now(), now())`,
      [
        legacyId,
        bot.bot_id,
        svc.ctx.secrets.encrypt(
          JSON.stringify({ missing_digits: '739', expiry_month: '09', expiry_year: '2030' }),
        ),
      ],
    );
    await svc.ctx.db.query(
      `INSERT INTO card_profiles (card_id, profile_index, updated_at) SELECT $1, i, now() FROM generate_series(1, 6) i`,
      [legacyId],
    );
    const res = await req('POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, { same_card_as: legacyId }, o);
    expect(res.statusCode, res.body).toBe(201);
    const start = res.json();
    expect(start).toMatchObject({
      status: 'pending_activation',
      real_profile_index: 4,
      missing_digit_positions: [9, 10, 11],
      same_card_as: legacyId,
    });
    // Its activation is not asked whether it is the same card: it is, on purpose.
    const act = await req(
      'POST',
      `/api/v1/owner/bots/${bot.bot_id}/cards/${start.card_id}/activate`,
      splitCard(start).activation,
      o,
    );
    expect(act.statusCode, act.body).toBe(200);
    // The old file and the new one hide the same three digits of the real number.
    const legacyFile = (
      await req('GET', `/api/v1/owner/bots/${bot.bot_id}/cards/${legacyId}/profiles-file`, undefined, o)
    ).json();
    expect(legacyFile.missing_digit_positions).toEqual(start.missing_digit_positions);
    const held = await checkout(svc, bot, { ...purchase(4, 100), card_id: start.card_id });
    expect(held.statusCode, held.body).toBe(202);
    expect((await poll(svc, bot, held.json().confirmation_id)).json().status).toBe('pending');
  });
});
