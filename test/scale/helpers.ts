import { expect } from 'vitest';
import { createOwnerToken, findOrCreateOwner } from '../../src/owners/auth.ts';
import type { Queryable } from '../../src/platform/db/port.ts';
import type { Db } from '../../src/platform/db/port.ts';
import type { Received } from '../webhooks/helpers.ts';
import { splitCard } from '../support/cards.ts';
import { GENEROUS_MASTER_BUDGETS } from '../support/service.ts';

// Helpers for tests that drive real `botpay serve` processes over HTTP (nothing in-process):
// every request goes through the network to one of the instances, as a bot or an owner would.

export const DIGITS = '739';

export interface Answer {
  status: number;
  body: Record<string, unknown>;
}

/** One HTTP request to an instance. Throws on a network error (instance down); answers otherwise. */
export async function call(
  baseUrl: string,
  method: string,
  path: string,
  options: { auth?: string; body?: unknown; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.auth) headers.authorization = `Bearer ${options.auth}`;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  let body: Record<string, unknown> = {};
  try {
    body = text ? (JSON.parse(text) as Record<string, unknown>) : {};
  } catch {
    body = { text };
  }
  return { status: res.status, body };
}

/** An owner and a bearer token, written straight to the database (the sign-in mail is not under test here). */
export async function ownerToken(
  db: Db,
  email: string,
): Promise<{ id: string; email: string; token: string }> {
  const now = Date.now();
  return db.transaction(async (tx) => {
    const owner = await findOrCreateOwner(tx, email, now);
    const token = await createOwnerToken(tx, owner.id, now);
    return { id: owner.id, email: owner.email, token };
  });
}

export function purchase(profileIndex: number, amountCents: number) {
  return {
    profile_index: profileIndex,
    merchant_name: 'Acme Books',
    merchant_url: 'https://acme.example/books/1',
    item_name: 'A book',
    amount_cents: amountCents,
    category: 'retail',
  };
}

export interface ScaleBot {
  bot_id: string;
  api_key: string;
  card_id: string;
  real_profile_index: number;
}

/**
 * Registers (from its own client address, X-Forwarded-For with TRUST_PROXY=true), claims, and sets
 * up an active card through the given instances; `urls[i % n]` spreads the steps over them.
 */
export async function setupBot(
  urls: string[],
  owner: { email: string; token: string },
  options: {
    ip: string;
    callbackUrl: string;
    card: Record<string, unknown>;
  },
): Promise<ScaleBot> {
  const at = (i: number) => urls[i % urls.length]!;
  const reg = await call(at(0), 'POST', '/api/v1/bots/register', {
    headers: { 'x-forwarded-for': options.ip },
    body: {
      bot_name: `scale-${Math.random().toString(36).slice(2, 10)}`,
      owner_email: owner.email,
      callback_url: options.callbackUrl,
    },
  });
  expect(reg.status, JSON.stringify(reg.body)).toBe(201);
  const bot = reg.body as { bot_id: string; api_key: string; claim_token: string };
  const claim = await call(at(1), 'POST', '/api/v1/owner/claims', {
    auth: owner.token,
    body: { claim_token: bot.claim_token },
  });
  expect(claim.status, JSON.stringify(claim.body)).toBe(200);
  const start = await call(at(2), 'POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {
    auth: owner.token,
    body: { label: 'scale card' },
  });
  expect(start.status, JSON.stringify(start.body)).toBe(201);
  const card = start.body as {
    card_id: string;
    real_profile_index: number;
    missing_digit_positions: number[];
  };
  const act = await call(at(0), 'POST', `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}/activate`, {
    auth: owner.token,
    // One owner's bots get the same test number here, each a card of its own (not the same card).
    body: { ...splitCard({ ...card, bot_id: bot.bot_id }).activation, different_card: true },
  });
  expect(act.status, JSON.stringify(act.body)).toBe(200);
  const patch = await call(at(1), 'PATCH', `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}`, {
    auth: owner.token,
    body: options.card,
  });
  expect(patch.status, JSON.stringify(patch.body)).toBe(200);
  const profile = await call(
    at(2),
    'PUT',
    `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}/profiles/${card.real_profile_index}`,
    { auth: owner.token, body: { allowance_cents: 10_000_000 } },
  );
  expect(profile.status, JSON.stringify(profile.body)).toBe(200);
  return {
    bot_id: bot.bot_id,
    api_key: bot.api_key,
    card_id: card.card_id,
    real_profile_index: card.real_profile_index,
  };
}

export async function putGuardrails(url: string, token: string): Promise<void> {
  const res = await call(url, 'PUT', '/api/v1/owner/guardrails', {
    auth: token,
    body: GENEROUS_MASTER_BUDGETS,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

/**
 * The ledger invariants, for every bot in the database: each ledger transaction sums to zero, the
 * wallet projections equal the sums of their entries, and the four accounts sum to zero.
 */
export async function expectLedgerBalanced(db: Queryable): Promise<void> {
  const unbalanced = await db.query<{ transaction_id: string; s: number }>(
    `SELECT transaction_id, sum(amount_micros)::bigint AS s FROM ledger_entries
      GROUP BY transaction_id HAVING sum(amount_micros) <> 0`,
  );
  expect(unbalanced).toEqual([]);
  const empty = await db.query<{ id: string }>(
    `SELECT t.id FROM ledger_transactions t WHERE NOT EXISTS (SELECT 1 FROM ledger_entries e WHERE e.transaction_id = t.id)`,
  );
  expect(empty).toEqual([]);
  const projections = await db.query<{
    bot_id: string;
    available_micros: number;
    held_micros: number;
    available_sum: number;
    held_sum: number;
  }>(
    `SELECT w.bot_id, w.available_micros, w.held_micros,
            coalesce((SELECT sum(amount_micros) FROM ledger_entries e WHERE e.bot_id = w.bot_id AND e.account = 'wallet_available'), 0)::bigint AS available_sum,
            coalesce((SELECT sum(amount_micros) FROM ledger_entries e WHERE e.bot_id = w.bot_id AND e.account = 'wallet_held'), 0)::bigint AS held_sum
       FROM wallets w`,
  );
  for (const p of projections) {
    expect({ bot: p.bot_id, available: p.available_micros, held: p.held_micros }).toEqual({
      bot: p.bot_id,
      available: Number(p.available_sum),
      held: Number(p.held_sum),
    });
    expect(p.available_micros).toBeGreaterThanOrEqual(0);
    expect(p.held_micros).toBeGreaterThanOrEqual(0);
  }
}

/**
 * Every real confirmation has exactly the money movements its status implies: approved = one
 * purchase, or one hold and one capture; denied/expired = one hold and one release; pending = one
 * hold. Decoys move no money. Nothing moves money without a confirmation (besides fundings).
 */
export async function expectOneMovementPerConfirmation(db: Queryable): Promise<Map<string, string>> {
  const rows = await db.query<{ id: string; status: string; is_real: boolean; kinds: string[] | null }>(
    `SELECT c.id, c.status, c.is_real,
            (SELECT array_agg(t.kind ORDER BY t.kind) FROM ledger_transactions t WHERE t.reference = c.id) AS kinds
       FROM checkout_confirmations c`,
  );
  const statuses = new Map<string, string>();
  for (const r of rows) {
    statuses.set(r.id, r.status);
    const kinds = (r.kinds ?? []).join(',');
    if (!r.is_real) {
      // Decoys move no money: only memo rows of the decoy reserve, one movement per decision.
      const decoyAllowed =
        r.status === 'approved'
          ? ['decoy_purchase', 'decoy_capture,decoy_hold']
          : r.status === 'pending'
            ? ['decoy_hold']
            : ['decoy_hold,decoy_release'];
      expect(decoyAllowed, `${r.id} (${r.status}) has ${kinds}`).toContain(kinds);
      continue;
    }
    const allowed =
      r.status === 'approved'
        ? ['purchase', 'capture,hold']
        : r.status === 'pending'
          ? ['hold']
          : ['hold,release'];
    expect(allowed, `${r.id} (${r.status}) has ${kinds}`).toContain(kinds);
  }
  const orphans = await db.query<{ id: string; kind: string }>(
    `SELECT t.id, t.kind FROM ledger_transactions t WHERE t.kind NOT IN ('funding', 'decoy_return')
        AND NOT EXISTS (SELECT 1 FROM checkout_confirmations c WHERE c.id = t.reference)`,
  );
  expect(orphans).toEqual([]);
  return statuses;
}

/** Waits until every event in the database reached the receiver and no delivery is pending. */
export async function waitForDrain(
  db: Queryable,
  received: () => Received[],
  timeoutMs: number,
): Promise<{ events: string[]; missing: string[]; pending: number }> {
  const deadline = Date.now() + timeoutMs;
  let state = { events: [] as string[], missing: [] as string[], pending: -1 };
  for (;;) {
    const events = (await db.query<{ id: string }>('SELECT id FROM events')).map((r) => r.id);
    const [pending] = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'pending'`,
    );
    const seen = new Set(received().map((r) => String(r.headers['x-service-event-id'])));
    state = { events, missing: events.filter((id) => !seen.has(id)), pending: pending!.n };
    if (state.missing.length === 0 && state.pending === 0) return state;
    if (Date.now() > deadline) return state;
    await new Promise((r) => setTimeout(r, 250));
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * The cards' spend counters agree with the confirmations: for every card, the day counters sum to
 * the real purchases that are approved or still held (denied and expired ones were given back).
 */
export async function expectCountersMatchConfirmations(db: Queryable): Promise<void> {
  const rows = await db.query<{ card_id: string; counted: number; committed: number }>(
    `SELECT k.id AS card_id,
            coalesce((SELECT s.day_micros FROM spend_windows s WHERE s.scope = 'card:' || k.id), 0)::bigint AS counted,
            coalesce((SELECT sum(c.amount_micros) FROM checkout_confirmations c
                       WHERE c.card_id = k.id AND c.is_real AND c.status IN ('approved', 'pending')), 0)::bigint AS committed
       FROM cards k`,
  );
  expect(rows.length).toBeGreaterThan(0);
  for (const r of rows)
    expect({ card: r.card_id, counted: Number(r.counted) }).toEqual({
      card: r.card_id,
      counted: Number(r.committed),
    });
}
