import { randomInt } from 'node:crypto';
import { audit } from '../owners/audit.ts';
import { assertOwnedBot, lockOwnedBot } from '../owners/locks.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne, one, type Queryable } from '../platform/db/port.ts';
import { ApiError, notFound } from '../platform/errors.ts';
import { newId } from '../platform/ids.ts';
import { microsToUsd, optionalCentsToMicros } from '../platform/money.ts';
import { iso } from '../platform/time.ts';
import { decoyProfile, maskMissing } from './decoys.ts';
import {
  type ActivationRequest,
  completesLuhn,
  FIRST_MISSING_POSITION,
  LAST_MISSING_POSITION,
  missingDigitsSentence,
  networkOf,
  PROFILE_COUNT,
} from './split.ts';

// Self-hosted cards with split knowledge (docs/security.md). The service picks the real profile
// index and three consecutive missing digit positions; where the owner types the full number (the
// dashboard's card wizard, `botpay card split`), src/cards/split.ts builds the bot's profiles file
// and sends the service only, per profile, the 3 digits at those positions (and the expiry), which
// it stores encrypted. The service never sees the rest of any number.

export { PROFILE_COUNT };

export type ApprovalMode = 'ask_for_everything' | 'auto_approve_under_threshold' | 'auto_approve_by_category';
export type ProfileApprovalRule = 'follow_card' | 'ask_for_everything' | 'auto_approve_under_threshold';
export type AllowanceWindow = 'day' | 'week' | 'month';

export interface CardRow {
  id: string;
  bot_id: string;
  label: string | null;
  status: 'pending_activation' | 'active' | 'frozen';
  real_profile_index: number;
  missing_position: number;
  secret_enc: string | null;
  /** Format 2: the six profiles' digits and expiries, encrypted (ProfileSecret[]). */
  profiles_enc: string | null;
  card_length: number | null;
  /** The card whose six profiles this one shares (the same number added again); null for an original. */
  same_card_as: string | null;
  per_transaction_micros: number;
  daily_micros: number;
  monthly_micros: number;
  approval_mode: ApprovalMode;
  approval_threshold_micros: number;
  approved_categories: string[];
  created_at: Date;
  activated_at: Date | null;
  [key: string]: unknown;
}

export interface ProfileRow {
  card_id: string;
  profile_index: number;
  enabled: boolean;
  allowance_micros: number;
  allowance_window: AllowanceWindow;
  approval_rule: ProfileApprovalRule;
  approval_threshold_micros: number;
  [key: string]: unknown;
}

/** The card secret (3 digits and expiry), encrypted with SECRET_KEY in cards.secret_enc. */
export interface CardSecret {
  missing_digits: string;
  expiry_month: string;
  expiry_year: string;
}

/** One profile's part of a format-2 card: what an approved checkout on it returns. */
export interface ProfileSecret extends CardSecret {
  profile_index: number;
}

/**
 * Expiries for the decoys: the real card's year, and a month drawn uniformly among the months of
 * that year not yet past, so the real expiry is one draw among six from the same range.
 */
export function decoyExpiryMonth(year: number, now: Date, draw: (max: number) => number = randomInt): string {
  const first = year === now.getUTCFullYear() ? now.getUTCMonth() + 1 : 1;
  return String(first + draw(13 - first)).padStart(2, '0');
}

async function lockOwnedCard(
  tx: Queryable,
  ownerId: string,
  botId: string,
  cardId: string,
): Promise<CardRow> {
  await lockOwnedBot(tx, ownerId, botId);
  const card = await maybeOne<CardRow>(tx, 'SELECT * FROM cards WHERE id = $1 AND bot_id = $2 FOR UPDATE', [
    cardId,
    botId,
  ]);
  if (!card) throw new ApiError('card_not_found', 'Card not found.');
  return card;
}

export function presentCard(card: CardRow, profiles: ProfileRow[]) {
  return {
    card_id: card.id,
    bot_id: card.bot_id,
    label: card.label,
    status: card.status,
    real_profile_index: card.real_profile_index,
    missing_digit_positions: [card.missing_position, card.missing_position + 1, card.missing_position + 2],
    guardrails: {
      per_transaction_usd: microsToUsd(card.per_transaction_micros),
      daily_usd: microsToUsd(card.daily_micros),
      monthly_usd: microsToUsd(card.monthly_micros),
    },
    approval_mode: card.approval_mode,
    approval_threshold_usd: microsToUsd(card.approval_threshold_micros),
    approved_categories: card.approved_categories,
    profiles: profiles.map(presentProfile),
    /** Activated before format 2: the service can still give its (legacy) profiles file. */
    legacy_profiles_file: card.status !== 'pending_activation' && card.profiles_enc === null,
    same_card_as: card.same_card_as,
    created_at: iso(card.created_at),
    activated_at: card.activated_at ? iso(card.activated_at) : null,
  };
}

function presentProfile(p: ProfileRow) {
  return {
    profile_index: p.profile_index,
    enabled: p.enabled,
    allowance_usd: microsToUsd(p.allowance_micros),
    allowance_window: p.allowance_window,
    approval_rule: p.approval_rule,
    approval_threshold_usd: microsToUsd(p.approval_threshold_micros),
  };
}

async function loadProfiles(q: Queryable, cardId: string): Promise<ProfileRow[]> {
  return q.query<ProfileRow>('SELECT * FROM card_profiles WHERE card_id = $1 ORDER BY profile_index', [
    cardId,
  ]);
}

/**
 * Starts a card. The service picks the real profile index and the three missing positions, unless
 * the card is one the owner already added (`sameCardAs`, a card of any of the owner's bots): one
 * card number has one set of profiles (docs/security.md, "One card, one set of profiles"). Two
 * files of the same number that differ in their decoys show which profile is real (the one they
 * share), and two that hide different digits hold the whole number between them. So a card
 * activated with format 2 is shared as it is: the new card is active at once with the same real
 * profile, positions and per-profile digits and expiries, and the bot gets the same profiles file.
 * A legacy card (its decoys were built by the service) keeps its real profile and positions, and
 * the owner builds a new file for them.
 */
export async function startCard(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  input: { label?: string | undefined; sameCardAs?: string | undefined } = {},
) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await lockOwnedBot(tx, ownerId, botId);
    const source = input.sameCardAs === undefined ? null : await ownersCard(tx, ownerId, input.sameCardAs);
    const id = newId('card');
    await tx.query(
      `INSERT INTO cards (id, bot_id, label, status, real_profile_index, missing_position, created_at)
       VALUES ($1, $2, $3, 'pending_activation', $4, $5, $6)`,
      [
        id,
        botId,
        input.label ?? null,
        randomInt(1, PROFILE_COUNT + 1),
        randomInt(FIRST_MISSING_POSITION, LAST_MISSING_POSITION + 1),
        new Date(now),
      ],
    );
    // Every profile starts with the same allowance, so none stands out.
    await tx.query(
      `INSERT INTO card_profiles (card_id, profile_index, updated_at)
       SELECT $1, i, $2 FROM generate_series(1, ${PROFILE_COUNT}) AS i`,
      [id, new Date(now)],
    );
    await audit(tx, { ownerId, botId, action: 'card.started', details: { card_id: id }, at: now });
    const card =
      source === null ? null : await takeProfilesOf(tx, { ownerId, botId, cardId: id, source, now });
    const row = card ?? (await one<CardRow>(tx, 'SELECT * FROM cards WHERE id = $1', [id]));
    return {
      card_id: id,
      bot_id: botId,
      status: row.status === 'active' ? ('active' as const) : ('pending_activation' as const),
      real_profile_index: row.real_profile_index,
      missing_digit_positions: [row.missing_position, row.missing_position + 1, row.missing_position + 2],
      same_card_as: row.same_card_as,
    };
  });
}

/**
 * A card waiting for activation becomes the same card as one the owner already added (the card
 * wizard's answer to possible_same_card, or an owner who started the card before noticing).
 */
export async function makeSameCard(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  cardId: string,
  sameCardAs: string,
) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    const card = await lockOwnedCard(tx, ownerId, botId, cardId);
    if (card.status !== 'pending_activation') {
      throw new ApiError('conflict', 'The card is already activated: start a new card with same_card_as.');
    }
    const source = await ownersCard(tx, ownerId, sameCardAs);
    const updated = await takeProfilesOf(tx, { ownerId, botId, cardId, source, now });
    return presentCard(updated, await loadProfiles(tx, cardId));
  });
}

/**
 * Gives a pending card the profiles of `source` (see startCard): a format-2 source is shared as it
 * is and the card is active at once; a legacy source gives its real profile and positions, and the
 * owner builds a new file for them.
 */
async function takeProfilesOf(
  tx: Queryable,
  p: { ownerId: string; botId: string; cardId: string; source: CardRow; now: number },
): Promise<CardRow> {
  const { source } = p;
  if (source.id === p.cardId || source.status === 'pending_activation') {
    throw new ApiError(
      'conflict',
      'same_card_as must name an activated card: activate that one first, or add this one as a new card.',
      { field: 'same_card_as' },
    );
  }
  // A chain of copies points at its first card: they all share one set of profiles.
  const root = source.same_card_as ?? source.id;
  const shared = source.profiles_enc !== null;
  await tx.query(
    `UPDATE cards SET real_profile_index = $2, missing_position = $3, same_card_as = $4,
       profiles_enc = $5, card_length = $6, status = $7, activated_at = $8
     WHERE id = $1`,
    [
      p.cardId,
      source.real_profile_index,
      source.missing_position,
      root,
      shared ? source.profiles_enc : null,
      shared ? source.card_length : null,
      shared ? 'active' : 'pending_activation',
      shared ? new Date(p.now) : null,
    ],
  );
  await audit(tx, {
    ownerId: p.ownerId,
    botId: p.botId,
    action: shared ? 'card.activated' : 'card.updated',
    details: { card_id: p.cardId, same_card_as: root },
    at: p.now,
  });
  return one<CardRow>(tx, 'SELECT * FROM cards WHERE id = $1', [p.cardId]);
}

/** The owner's activated cards on every bot, for "add a card you already use" (same_card_as). */
export async function listOwnerCards(q: Queryable, ownerId: string) {
  const rows = await q.query<CardRow & { bot_name: string }>(
    `SELECT c.*, b.name AS bot_name FROM cards c JOIN bots b ON b.id = c.bot_id
      WHERE b.owner_id = $1 AND c.status <> 'pending_activation' ORDER BY c.created_at, c.id`,
    [ownerId],
  );
  return rows.map((c) => ({
    card_id: c.id,
    bot_id: c.bot_id,
    bot_name: c.bot_name,
    label: c.label,
    status: c.status,
    legacy: c.profiles_enc === null,
    same_card_as: c.same_card_as,
  }));
}

/** A card of any of the owner's bots, for same_card_as; card_not_found otherwise. */
async function ownersCard(q: Queryable, ownerId: string, cardId: string): Promise<CardRow> {
  const card = await maybeOne<CardRow>(
    q,
    'SELECT c.* FROM cards c JOIN bots b ON b.id = c.bot_id WHERE c.id = $1 AND b.owner_id = $2',
    [cardId, ownerId],
  );
  if (!card)
    throw new ApiError('card_not_found', 'same_card_as names no card of yours.', { field: 'same_card_as' });
  return card;
}

/** The real profile's expiry of an activated card (format 2 or legacy), or null when unreadable. */
function realExpiry(ctx: AppContext, card: CardRow): CardSecret | null {
  try {
    if (card.profiles_enc !== null) {
      const all = JSON.parse(ctx.secrets.decrypt(card.profiles_enc)) as ProfileSecret[];
      return all.find((p) => p.profile_index === card.real_profile_index) ?? null;
    }
    if (card.secret_enc !== null) return JSON.parse(ctx.secrets.decrypt(card.secret_enc)) as CardSecret;
  } catch {
    // A damaged secret resembles nothing.
  }
  return null;
}

/**
 * Another activated card of the owner that this activation may be the same card as: the same
 * expiry and (format 2) the same length. The service never holds a number, so this is all it can
 * compare; a different card that happens to match is confirmed with `different_card`.
 */
async function resemblingCard(
  ctx: AppContext,
  tx: Queryable,
  ownerId: string,
  card: CardRow,
  a: ActivationRequest,
): Promise<(CardRow & { bot_name: string }) | null> {
  const others = await tx.query<CardRow & { bot_name: string }>(
    `SELECT c.*, b.name AS bot_name FROM cards c JOIN bots b ON b.id = c.bot_id
      WHERE b.owner_id = $1 AND c.id <> $2 AND c.status <> 'pending_activation'
      ORDER BY c.created_at, c.id`,
    [ownerId, card.id],
  );
  for (const other of others) {
    if (other.card_length !== null && other.card_length !== a.card_length) continue;
    const expiry = realExpiry(ctx, other);
    if (
      expiry !== null &&
      Number(expiry.expiry_month) === Number(a.expiry_month) &&
      Number(expiry.expiry_year) === Number(a.expiry_year)
    ) {
      return other;
    }
  }
  return null;
}

function invalid(message: string, field: string): ApiError {
  return new ApiError('validation_error', message, { field });
}

/** Checks a format-2 activation: 400 validation_error naming what is wrong; nothing is stored. */
function checkActivation(a: ActivationRequest, position: number, now: Date): void {
  const network = networkOf(a.bin);
  if (!network) throw invalid('bin does not start like a card of a known network.', 'bin');
  if (!network.lengths.includes(a.card_length)) {
    throw invalid(
      `The BIN is a ${network.name} prefix, whose numbers have ${network.lengths.join(' or ')} digits, not ${a.card_length}.`,
      'card_length',
    );
  }
  if (position + 3 > a.card_length - 1)
    throw invalid('card_length is too short for the missing positions.', 'card_length');
  const seen = new Set<number>();
  for (const p of a.profiles) {
    if (seen.has(p.profile_index))
      throw invalid(`profile_index ${p.profile_index} appears twice.`, 'profiles');
    seen.add(p.profile_index);
    if (!completesLuhn(p.missing_digits, position, a.card_length, p.visible_luhn)) {
      throw invalid(
        `Profile ${p.profile_index}: missing_digits do not complete a Luhn-valid number (build the profiles with the card wizard or botpay card split).`,
        'profiles',
      );
    }
  }
  if (seen.size !== PROFILE_COUNT)
    throw invalid('profiles must list profile_index 1 to 6 once each.', 'profiles');
  const month = Number(a.expiry_month);
  const year = Number(a.expiry_year);
  if (year < now.getUTCFullYear() || (year === now.getUTCFullYear() && month < now.getUTCMonth() + 1)) {
    throw invalid('The card has expired.', 'expiry_year');
  }
}

/**
 * Activates a started card with the digits built where the owner typed the number (format 2). The
 * real profile keeps the owner's expiry; each decoy gets the same year and a drawn month.
 */
export async function activateCard(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  cardId: string,
  activation: ActivationRequest,
) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    const card = await lockOwnedCard(tx, ownerId, botId, cardId);
    if (card.status !== 'pending_activation') {
      throw new ApiError('conflict', 'The card is already activated.');
    }
    checkActivation(activation, card.missing_position, new Date(now));
    if (card.same_card_as === null && activation.different_card !== true) {
      const other = await resemblingCard(ctx, tx, ownerId, card, activation);
      if (other) {
        throw new ApiError(
          'possible_same_card',
          `This card has the length and expiry of card ${other.label ? `"${other.label}" ` : ''}(${other.id}) on bot ${other.bot_name}. If it is the same card number, start this card with same_card_as: ${other.id} instead, so that both bots hold the same six profiles (two different files of one card show which profile is real). If it is a different card, activate again with different_card: true.`,
          { card_id: other.id, bot_id: other.bot_id, bot_name: other.bot_name, label: other.label },
        );
      }
    }
    const year = String(Number(activation.expiry_year));
    const secrets: ProfileSecret[] = [...activation.profiles]
      .sort((a, b) => a.profile_index - b.profile_index)
      .map((p) => ({
        profile_index: p.profile_index,
        missing_digits: p.missing_digits,
        expiry_month:
          p.profile_index === card.real_profile_index
            ? String(Number(activation.expiry_month)).padStart(2, '0')
            : decoyExpiryMonth(Number(year), new Date(now)),
        expiry_year: year,
      }));
    await tx.query(
      `UPDATE cards SET status = 'active', profiles_enc = $2, card_length = $3, activated_at = $4 WHERE id = $1`,
      [cardId, ctx.secrets.encrypt(JSON.stringify(secrets)), activation.card_length, new Date(now)],
    );
    await audit(tx, { ownerId, botId, action: 'card.activated', details: { card_id: cardId }, at: now });
    const updated = await one<CardRow>(tx, 'SELECT * FROM cards WHERE id = $1', [cardId]);
    return presentCard(updated, await loadProfiles(tx, cardId));
  });
}

export interface CardPatch {
  per_transaction_cents?: number;
  daily_cents?: number;
  monthly_cents?: number;
  approval_mode?: ApprovalMode;
  approval_threshold_cents?: number;
  approved_categories?: string[];
  status?: 'active' | 'frozen';
}

export async function updateCard(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  cardId: string,
  patch: CardPatch,
) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    const card = await lockOwnedCard(tx, ownerId, botId, cardId);
    if (patch.status && card.status === 'pending_activation') {
      throw new ApiError('conflict', 'Activate the card before changing its status.');
    }
    const categories = patch.approved_categories?.map((c) => c.trim().toLowerCase());
    await tx.query(
      `UPDATE cards SET
         per_transaction_micros = coalesce($2, per_transaction_micros),
         daily_micros = coalesce($3, daily_micros),
         monthly_micros = coalesce($4, monthly_micros),
         approval_mode = coalesce($5, approval_mode),
         approval_threshold_micros = coalesce($6, approval_threshold_micros),
         approved_categories = coalesce($7::jsonb, approved_categories),
         status = coalesce($8, status)
       WHERE id = $1`,
      [
        cardId,
        optionalCentsToMicros(patch.per_transaction_cents),
        optionalCentsToMicros(patch.daily_cents),
        optionalCentsToMicros(patch.monthly_cents),
        patch.approval_mode ?? null,
        optionalCentsToMicros(patch.approval_threshold_cents),
        categories ? JSON.stringify(categories) : null,
        patch.status ?? null,
      ],
    );
    await audit(tx, {
      ownerId,
      botId,
      action: 'card.updated',
      details: { card_id: cardId, ...patch },
      at: now,
    });
    const updated = await one<CardRow>(tx, 'SELECT * FROM cards WHERE id = $1', [cardId]);
    return presentCard(updated, await loadProfiles(tx, cardId));
  });
}

export interface ProfileUpdate {
  allowance_cents?: number;
  allowance_window?: AllowanceWindow;
  approval_rule?: ProfileApprovalRule;
  approval_threshold_cents?: number;
  enabled?: boolean;
}

export async function updateProfile(
  ctx: AppContext,
  ownerId: string,
  botId: string,
  cardId: string,
  profileIndex: number,
  update: ProfileUpdate,
) {
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await lockOwnedCard(tx, ownerId, botId, cardId);
    const rows = await tx.query<ProfileRow>(
      `UPDATE card_profiles SET
         allowance_micros = coalesce($3, allowance_micros),
         allowance_window = coalesce($4, allowance_window),
         approval_rule = coalesce($5, approval_rule),
         approval_threshold_micros = coalesce($6, approval_threshold_micros),
         enabled = coalesce($7, enabled),
         updated_at = $8
       WHERE card_id = $1 AND profile_index = $2 RETURNING *`,
      [
        cardId,
        profileIndex,
        optionalCentsToMicros(update.allowance_cents),
        update.allowance_window ?? null,
        update.approval_rule ?? null,
        optionalCentsToMicros(update.approval_threshold_cents),
        update.enabled ?? null,
        new Date(now),
      ],
    );
    const row = rows[0];
    if (!row) throw notFound('Profile');
    await audit(tx, {
      ownerId,
      botId,
      action: 'card.profile_updated',
      details: { card_id: cardId, profile_index: profileIndex, ...update },
      at: now,
    });
    return { card_id: cardId, ...presentProfile(row) };
  });
}

/** The owner's card: 404 not_found for another owner's (or unknown) bot, card_not_found for an unknown card. */
async function ownedCard(ctx: AppContext, ownerId: string, botId: string, cardId: string): Promise<CardRow> {
  await assertOwnedBot(ctx.db, ownerId, botId);
  const card = await maybeOne<CardRow>(ctx.db, 'SELECT * FROM cards WHERE id = $1 AND bot_id = $2', [
    cardId,
    botId,
  ]);
  if (!card) throw new ApiError('card_not_found', 'Card not found.');
  return card;
}

export async function getCard(ctx: AppContext, ownerId: string, botId: string, cardId: string) {
  const card = await ownedCard(ctx, ownerId, botId, cardId);
  return presentCard(card, await loadProfiles(ctx.db, cardId));
}

/**
 * The payment profiles file of a card activated before format 2 (legacy). The real profile carries placeholders the owner completes
 * with their own card (all of it but the 3 missing digits, which the bot gets per purchase); the
 * decoys are complete. The file never says which profile is real.
 */
export async function profilesFile(ctx: AppContext, ownerId: string, botId: string, cardId: string) {
  const card = await ownedCard(ctx, ownerId, botId, cardId);
  if (card.profiles_enc !== null || card.status === 'pending_activation') {
    // Format 2 is built where the owner typed the number; the service never had the file.
    throw new ApiError(
      'conflict',
      "The service does not hold this card's profiles file: it was built by the card wizard or botpay card split, where the number was typed.",
    );
  }
  const year = new Date(card.created_at).getUTCFullYear();
  const p = card.missing_position;
  const profiles = [];
  for (let index = 1; index <= PROFILE_COUNT; index++) {
    if (index === card.real_profile_index) {
      profiles.push({
        profile_index: index,
        card_number: `${'#'.repeat(p)}***${'#'.repeat(13 - p)}`,
        cardholder_name: '<cardholder name as printed on the card>',
        billing_address: {
          line1: '<street and number>',
          city: '<city>',
          state: '<state or region>',
          postal_code: '<postal code>',
          country: '<2-letter country code>',
        },
      });
      continue;
    }
    const decoy = decoyProfile(ctx.secrets, card.id, index, year);
    profiles.push({
      profile_index: index,
      card_number: maskMissing(decoy.cardNumber, p),
      cardholder_name: decoy.cardholderName,
      billing_address: decoy.billingAddress,
    });
  }
  return {
    format: 'botpay-payment-profiles/1' as const,
    card_id: card.id,
    bot_id: botId,
    missing_digit_positions: [p, p + 1, p + 2],
    missing_digits_are: missingDigitsSentence([p, p + 1, p + 2]),
    instructions:
      'Owner: complete the profile whose card_number contains # with your card number (replace every # by the digit at that position; leave *** as it is), your name and billing address, then give this file to your bot. Bot: pass profile_index at checkout; an approved checkout returns missing_digits (the *** positions) and the expiry.',
    profiles,
  };
}

/** Cards of a bot for the owner's bot detail. */
export async function listBotCards(q: Queryable, botId: string) {
  const cards = await q.query<CardRow>('SELECT * FROM cards WHERE bot_id = $1 ORDER BY created_at', [botId]);
  const out = [];
  for (const card of cards) out.push(presentCard(card, await loadProfiles(q, card.id)));
  return out;
}
