import type { Queryable } from '../platform/db/port.ts';
import { newId } from '../platform/ids.ts';

// The double-entry ledger. Every money movement is one ledger transaction whose entries sum to
// zero (a deferred constraint trigger checks it at commit). Wallet balances are projections the
// database keeps in step with the entries (trigger ledger_apply_entry, once per INSERT; a purchase's
// own entries are projected by spend_run, migration 0055), and the wallets CHECK
// constraints make a negative available balance or hold impossible.
//
// Accounts: wallet_available (spendable), wallet_held (reserved for pending approvals),
// owner_funding (what the owner put in, negative), merchant_settlement (paid out for purchases).
// Decoy memo accounts (never money; docs/security.md): decoy_cover (where the decoy reserve comes
// from and returns to), decoy_spent and decoy_held (the reserve: what decoy purchases took from the
// balance the bot sees; kept in wallets.decoy_spent_micros / decoy_held_micros).

export type Account =
  | 'wallet_available'
  | 'wallet_held'
  | 'owner_funding'
  | 'merchant_settlement'
  | 'decoy_cover'
  | 'decoy_spent'
  | 'decoy_held'
  | 'x402_deposits'
  | 'x402_available'
  | 'x402_held'
  | 'x402_authorized'
  | 'x402_paid';

export type LedgerKind =
  | 'funding'
  | 'purchase'
  | 'hold'
  | 'capture'
  | 'release'
  | 'decoy_purchase'
  | 'decoy_hold'
  | 'decoy_capture'
  | 'decoy_release'
  | 'decoy_return'
  | 'x402_deposit'
  | 'x402_payment'
  | 'x402_hold'
  | 'x402_approve'
  | 'x402_release'
  | 'x402_settle'
  | 'x402_lapse'
  | 'x402_refuse';

/** Ledger kinds that move the owner's money (the owner's transaction list); the others are decoy memos. */
export const MONEY_KINDS: readonly LedgerKind[] = ['funding', 'purchase', 'hold', 'capture', 'release'];

export interface Posting {
  account: Account;
  amountMicros: number;
}

export async function postLedger(
  tx: Queryable,
  entry: {
    botId: string;
    kind: LedgerKind;
    reference?: string | null;
    description?: string | null;
    postings: Posting[];
    at: number;
  },
): Promise<string> {
  const sum = entry.postings.reduce((s, p) => s + p.amountMicros, 0);
  if (
    sum !== 0 ||
    entry.postings.some((p) => !Number.isSafeInteger(p.amountMicros) || p.amountMicros === 0)
  ) {
    throw new Error(`unbalanced or non-integer ledger posting for ${entry.kind}`);
  }
  const id = newId('ltx');
  const at = new Date(entry.at);
  await tx.query(
    'INSERT INTO ledger_transactions (id, bot_id, kind, reference, description, created_at) VALUES ($1,$2,$3,$4,$5,$6)',
    [id, entry.botId, entry.kind, entry.reference ?? null, entry.description ?? null, at],
  );
  const values: string[] = [];
  const params: unknown[] = [id, entry.botId, at];
  for (const p of entry.postings) {
    params.push(p.account, p.amountMicros);
    values.push(`($1, $2, $${params.length - 1}, $${params.length}, $3)`);
  }
  await tx.query(
    `INSERT INTO ledger_entries (transaction_id, bot_id, account, amount_micros, created_at) VALUES ${values.join(', ')}`,
    params,
  );
  return id;
}

/** The money movements the service makes: each moves an amount from one account to another. */
const MOVEMENTS = {
  /** Owner adds money. */
  funding: { from: 'owner_funding', to: 'wallet_available', description: 'Wallet funded by owner' },
  /** Immediate purchase. */
  purchase: { from: 'wallet_available', to: 'merchant_settlement', description: 'Purchase approved' },
  /** Pending approval reserves the amount. */
  hold: { from: 'wallet_available', to: 'wallet_held', description: 'Held for owner approval' },
  /** Approval of a held purchase. */
  capture: { from: 'wallet_held', to: 'merchant_settlement', description: 'Held purchase approved' },
  /** Denial or expiry of a held purchase. */
  release: { from: 'wallet_held', to: 'wallet_available', description: 'Hold released' },
  /** A decoy purchase lowers the visible balance (spend_run writes it; listed for completeness). */
  decoy_purchase: { from: 'decoy_cover', to: 'decoy_spent', description: 'Decoy purchase approved' },
  decoy_hold: { from: 'decoy_cover', to: 'decoy_held', description: 'Decoy held' },
  decoy_capture: { from: 'decoy_held', to: 'decoy_spent', description: 'Held decoy approved' },
  decoy_release: { from: 'decoy_held', to: 'decoy_cover', description: 'Decoy hold released' },
  /** Part of the decoy reserve given back to the visible balance with an owner funding. */
  decoy_return: {
    from: 'decoy_spent',
    to: 'decoy_cover',
    description: 'Decoy reserve returned with a funding',
  },
  /** The partner wallet (x402, src/x402/): USDC that arrived on chain, to the micro. */
  x402_deposit: { from: 'x402_deposits', to: 'x402_available', description: 'USDC received on chain' },
  /** A payment authorised at once: the signed authorisation reserves the amount until it settles or lapses. */
  x402_payment: { from: 'x402_available', to: 'x402_authorized', description: 'x402 payment authorised' },
  x402_hold: { from: 'x402_available', to: 'x402_held', description: 'x402 payment held for owner approval' },
  x402_approve: { from: 'x402_held', to: 'x402_authorized', description: 'Held x402 payment approved' },
  x402_release: { from: 'x402_held', to: 'x402_available', description: 'x402 hold released' },
  /** The authorisation was used on chain: the money left the wallet. */
  x402_settle: { from: 'x402_authorized', to: 'x402_paid', description: 'x402 payment settled on chain' },
  /** The authorisation expired unused: the amount is spendable again. */
  x402_lapse: {
    from: 'x402_authorized',
    to: 'x402_available',
    description: 'x402 authorisation lapsed unused',
  },
  /** The seller refused the authorisation and it can never be used (src/x402/refusal.ts): spendable again. */
  x402_refuse: {
    from: 'x402_authorized',
    to: 'x402_available',
    description: 'x402 payment refused by the seller, released',
  },
} as const satisfies Record<LedgerKind, { from: Account; to: Account; description: string }>;

function move(kind: LedgerKind) {
  const { from, to, description } = MOVEMENTS[kind];
  return (tx: Queryable, botId: string, amountMicros: number, at: number, reference: string) =>
    postLedger(tx, {
      botId,
      kind,
      reference,
      description,
      postings: [
        { account: from, amountMicros: -amountMicros },
        { account: to, amountMicros },
      ],
      at,
    });
}

/** Owner adds money: owner_funding → wallet_available. */
export const fundWallet = move('funding');
/** Immediate purchase: wallet_available → merchant_settlement. */
export const debitPurchase = move('purchase');
/** Pending approval: wallet_available → wallet_held. */
export const placeHold = move('hold');
/** Approval of a held purchase: wallet_held → merchant_settlement. */
export const captureHold = move('capture');
/** Denial or expiry of a held purchase: wallet_held → wallet_available. */
export const releaseHold = move('release');
/** Approval of a held decoy: decoy_held → decoy_spent. */
export const captureDecoyHold = move('decoy_capture');
/** Denial or expiry of a held decoy: decoy_held → decoy_cover. */
export const releaseDecoyHold = move('decoy_release');
/** Moves of the partner wallet (src/x402/): see MOVEMENTS for each. */
export const x402Moves = {
  deposit: move('x402_deposit'),
  payment: move('x402_payment'),
  hold: move('x402_hold'),
  approve: move('x402_approve'),
  release: move('x402_release'),
  settle: move('x402_settle'),
  lapse: move('x402_lapse'),
  refuse: move('x402_refuse'),
};
/** Part of the decoy reserve back to the visible balance: decoy_spent → decoy_cover. */
export const returnDecoyReserve = move('decoy_return');

/** Sum of a bot's entries per account, straight from the ledger (tests and `doctor` compare it with the projection). */
export async function ledgerBalances(q: Queryable, botId: string): Promise<Record<Account, number>> {
  const rows = await q.query<{ account: Account; total: number }>(
    'SELECT account, sum(amount_micros)::bigint AS total FROM ledger_entries WHERE bot_id = $1 GROUP BY account',
    [botId],
  );
  const out: Record<Account, number> = {
    wallet_available: 0,
    wallet_held: 0,
    owner_funding: 0,
    merchant_settlement: 0,
    decoy_cover: 0,
    decoy_spent: 0,
    decoy_held: 0,
    x402_deposits: 0,
    x402_available: 0,
    x402_held: 0,
    x402_authorized: 0,
    x402_paid: 0,
  };
  for (const r of rows) out[r.account] = Number(r.total);
  return out;
}
