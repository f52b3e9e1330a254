import { expect } from 'vitest';
import { ledgerBalances } from '../../src/wallet/ledger.ts';
import type { ProfilesFile } from '../../src/cards/split.ts';
import { DIGITS, splitCard } from '../support/cards.ts';
import type { activeBot, TestOwner, TestService } from '../support/service.ts';

export { DIGITS };

export type Bot = Awaited<ReturnType<typeof activeBot>>;

export interface TestCard {
  card_id: string;
  real_profile_index: number;
  missing_digit_positions: number[];
  decoyIndex: number;
  /** The bot's payment profiles file, as the card wizard built it. */
  file: ProfilesFile;
}

/** Starts and activates a card for the bot; applies a PATCH when given. */
export async function setupCard(
  svc: TestService,
  owner: TestOwner,
  botId: string,
  patch: Record<string, unknown> = {},
  options: {
    /**
     * The card's real profile, instead of the service's draw (split-knowledge counterfactual copies:
     * the same trial played with each real profile in turn).
     */
    realIndex?: number;
  } = {},
): Promise<TestCard> {
  const start = await svc.app.inject({
    method: 'POST',
    url: `/api/v1/owner/bots/${botId}/cards`,
    headers: owner.auth,
    payload: { label: 'test card' },
  });
  expect(start.statusCode, start.body).toBe(201);
  const card = start.json() as TestCard;
  if (options.realIndex !== undefined) {
    await svc.ctx.db.query('UPDATE cards SET real_profile_index = $2 WHERE id = $1', [
      card.card_id,
      options.realIndex,
    ]);
    card.real_profile_index = options.realIndex;
  }
  const split = splitCard({ ...card, bot_id: botId });
  const act = await svc.app.inject({
    method: 'POST',
    url: `/api/v1/owner/bots/${botId}/cards/${card.card_id}/activate`,
    headers: owner.auth,
    // Tests give an owner's bots the same test number; each is a card of its own here (the
    // same-card check is tested in test/checkout/sameCard.test.ts).
    payload: { ...split.activation, different_card: true },
  });
  expect(act.statusCode, act.body).toBe(200);
  if (Object.keys(patch).length > 0) await patchCard(svc, owner, botId, card.card_id, patch);
  return { ...card, decoyIndex: card.real_profile_index === 1 ? 2 : 1, file: split.file };
}

export async function patchCard(
  svc: TestService,
  owner: TestOwner,
  botId: string,
  cardId: string,
  patch: Record<string, unknown>,
) {
  const res = await svc.app.inject({
    method: 'PATCH',
    url: `/api/v1/owner/bots/${botId}/cards/${cardId}`,
    headers: owner.auth,
    payload: patch,
  });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
}

export async function putProfile(
  svc: TestService,
  owner: TestOwner,
  botId: string,
  cardId: string,
  index: number,
  body: Record<string, unknown>,
) {
  const res = await svc.app.inject({
    method: 'PUT',
    url: `/api/v1/owner/bots/${botId}/cards/${cardId}/profiles/${index}`,
    headers: owner.auth,
    payload: body,
  });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
}

export function purchase(profileIndex: number, amountCents: number, extra: Record<string, unknown> = {}) {
  return {
    profile_index: profileIndex,
    merchant_name: 'Acme Books',
    merchant_url: 'https://acme.example/books/1',
    item_name: 'A book',
    amount_cents: amountCents,
    category: 'retail',
    ...extra,
  };
}

export function checkout(
  svc: TestService,
  bot: { auth: Record<string, string> },
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
) {
  return svc.app.inject({
    method: 'POST',
    url: '/api/v1/bot/merchant/checkout',
    headers: { ...bot.auth, ...headers },
    payload: body,
  });
}

export function poll(svc: TestService, bot: { auth: Record<string, string> }, confirmationId: string) {
  return svc.app.inject({
    url: `/api/v1/bot/merchant/checkout/status?confirmation_id=${encodeURIComponent(confirmationId)}`,
    headers: bot.auth,
  });
}

export async function wallet(svc: TestService, botId: string) {
  const rows = await svc.ctx.db.query<{
    available_micros: number;
    held_micros: number;
    decoy_spent_micros: number;
    decoy_held_micros: number;
    status: string;
  }>(
    'SELECT available_micros, held_micros, decoy_spent_micros, decoy_held_micros, status FROM wallets WHERE bot_id = $1',
    [botId],
  );
  return rows[0]!;
}

/** The ledger sums per account equal the wallet projections, and every transaction balances. */
export async function expectLedgerConsistent(svc: TestService, botId: string) {
  const sums = await ledgerBalances(svc.ctx.db, botId);
  const w = await wallet(svc, botId);
  expect(sums.wallet_available).toBe(w.available_micros);
  expect(sums.wallet_held).toBe(w.held_micros);
  expect(sums.wallet_available + sums.wallet_held + sums.owner_funding + sums.merchant_settlement).toBe(0);
  // The decoy reserve: memo accounts that balance among themselves and never exceed the money.
  expect(sums.decoy_spent).toBe(Number(w.decoy_spent_micros));
  expect(sums.decoy_held).toBe(Number(w.decoy_held_micros));
  expect(sums.decoy_cover + sums.decoy_spent + sums.decoy_held).toBe(0);
  expect(w.available_micros).toBeGreaterThanOrEqual(
    Number(w.decoy_spent_micros) + Number(w.decoy_held_micros),
  );
  return { ...sums, ...w };
}

/** What the scope's newest window of this kind holds (spend_windows, one row per scope). */
export async function counter(svc: TestService, scope: string, kind: 'day' | 'week' | 'month') {
  const rows = await svc.ctx.db.query<{ spent_micros: number }>(
    `SELECT coalesce(sum(${kind}_micros), 0)::bigint AS spent_micros FROM spend_windows WHERE scope = $1`,
    [scope],
  );
  return Number(rows[0]?.spent_micros ?? 0);
}

export async function events(svc: TestService, botId: string, type?: string) {
  const rows = await svc.ctx.db.query<{ type: string; body: string }>(
    'SELECT type, body FROM events WHERE bot_id = $1 ORDER BY created_at, id',
    [botId],
  );
  return rows
    .filter((r) => type === undefined || r.type === type)
    .map((r) => JSON.parse(r.body) as { event: string; data: Record<string, unknown> });
}
