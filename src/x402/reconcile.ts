import { subtractFromCounters } from '../spend/counters.ts';
import { emitEvent } from '../events/outbox.ts';
import type { AppContext } from '../platform/context.ts';
import { maybeOne } from '../platform/db/port.ts';
import { microsToUsd } from '../platform/money.ts';
import { present } from '../platform/present.ts';
import { x402Moves } from '../wallet/ledger.ts';
import { announceApproved, type X402PaymentRow, x402CounterSpecs } from './service.ts';
import { loadWallet } from './wallet.ts';

// Settlement and reconciliation of one partner wallet against the chain, all read at one block B:
// 1. each authorisation the service signed and has not seen finish: used on chain by B → settled
//    (tx hash from the AuthorizationUsed event; x402_authorized → x402_paid; purchase.approved for
//    a payment approved at once, when its seller's answer did not announce it already); unused and B's
//    timestamp past its validBefore → lapsed (it can never be used: x402_authorized →
//    x402_available, and the spend counters get the amount back);
// 2. the balance at B against the ledger (available + held + authorized, in micros, which are
//    micro-USDC): more on chain → a deposit of the difference, to the micro; less → an
//    owner alert (x402.balance_mismatch and a mail), once per distinct deficit.
// The wallet row is locked and B compared with the last block reconciled, so two instances doing
// this at once credit a deposit once.

export interface ReconcileResult {
  block: bigint;
  balanceMicro: bigint;
  settled: number;
  lapsed: number;
  depositedMicros: number;
  deficitMicro: bigint;
}

export async function reconcileWallet(ctx: AppContext, botId: string): Promise<ReconcileResult | null> {
  const cfg = ctx.config.x402;
  if (!cfg) return null;
  const wallet = await loadWallet(ctx.db, botId);
  if (!wallet || wallet.network !== cfg.network) return null;
  // viem loads on the first reconciliation of a wallet (./evm.ts).
  const { authorizationTx, authorizationUsed, latestBlock, usdcBalance } = await import('./chain.ts');
  const block = await latestBlock(cfg);
  const balance = await usdcBalance(cfg, wallet.address, block.number);
  const open = await ctx.db.query<X402PaymentRow>(
    `SELECT * FROM x402_payments WHERE bot_id = $1 AND status = 'authorized' AND pay_from = $2`,
    [botId, wallet.address],
  );
  const outcomes = new Map<string, { used: boolean; txHash: string | null }>();
  for (const p of open) {
    const nonce = present(p.nonce, `the nonce of authorized payment ${p.id}`);
    const used = await authorizationUsed(cfg, wallet.address, nonce, block.number);
    const txHash = used ? await authorizationTx(cfg, wallet.address, nonce, block.number) : null;
    outcomes.set(p.id, { used, txHash });
  }
  const now = ctx.clock.now();
  let alert: { deficitMicro: bigint; ownerEmail: string | null; botName: string } | null = null;
  const result = await ctx.db.transaction(async (tx) => {
    const r: ReconcileResult = {
      block: block.number,
      balanceMicro: balance,
      settled: 0,
      lapsed: 0,
      depositedMicros: 0,
      deficitMicro: 0n,
    };
    // Lock order as elsewhere: payment rows, then counters (a lapse gives them back), then the
    // wallet row (explicitly, or through the ledger trigger). Outcomes follow the row's status, so
    // a second instance finds nothing left to do.
    const due: Array<{ row: X402PaymentRow; used: boolean; txHash: string | null }> = [];
    for (const p of open) {
      const o = present(outcomes.get(p.id), `the chain outcome of ${p.id}`);
      const row = await maybeOne<X402PaymentRow>(
        tx,
        `SELECT * FROM x402_payments WHERE id = $1 AND status = 'authorized' FOR UPDATE`,
        [p.id],
      );
      // transferWithAuthorization requires block.timestamp < validBefore: from then on it can never be used.
      if (
        row &&
        (o.used ||
          block.timestamp >=
            BigInt(present(row.valid_before, `valid_before of authorized payment ${row.id}`)))
      )
        due.push({ row, ...o });
    }
    for (const d of due) {
      if (d.used) continue;
      await subtractFromCounters(
        tx,
        x402CounterSpecs(botId, d.row.owner_id),
        Number(d.row.amount_micros),
        new Date(d.row.created_at).getTime(),
      );
    }
    for (const { row, used, txHash } of due) {
      const amount = Number(row.amount_micros);
      if (used) {
        await tx.query(
          `UPDATE x402_payments SET status = 'settled', tx_hash = $2, finished_at = $3 WHERE id = $1`,
          [row.id, txHash, new Date(now)],
        );
        await x402Moves.settle(tx, botId, amount, now, row.id);
        // A payment approved at once announces its approval once it is known to be paid.
        await announceApproved(tx, row, now);
        await emitEvent(tx, {
          botId,
          type: 'x402.settled',
          data: {
            payment_id: row.id,
            amount: microsToUsd(amount),
            pay_to: row.pay_to,
            tx_hash: txHash,
            description: 'x402 payment settled on chain',
          },
          at: now,
        });
        r.settled++;
      } else {
        await tx.query(`UPDATE x402_payments SET status = 'lapsed', finished_at = $2 WHERE id = $1`, [
          row.id,
          new Date(now),
        ]);
        await x402Moves.lapse(tx, botId, amount, now, row.id);
        await emitEvent(tx, {
          botId,
          type: 'x402.lapsed',
          data: {
            payment_id: row.id,
            amount: microsToUsd(amount),
            pay_to: row.pay_to,
            description: 'x402 authorisation expired unused; the amount is back',
          },
          at: now,
        });
        r.lapsed++;
      }
    }
    const w = present(await loadWallet(tx, botId, true), 'the partner wallet row');
    if (w.address !== wallet.address || BigInt(String(w.reconciled_block)) >= block.number) return r;
    const after = present(await loadWallet(tx, botId), 'the partner wallet row');
    const ledgerMicro = BigInt(after.available_micros + after.held_micros + after.authorized_micros);
    if (balance > ledgerMicro) {
      const micros = Number(balance - ledgerMicro);
      await x402Moves.deposit(tx, botId, micros, now, `x402dep:${botId}:${block.number}`);
      await emitEvent(tx, {
        botId,
        type: 'x402.funded',
        data: {
          amount: microsToUsd(micros),
          address: w.address,
          description: 'USDC received in the partner wallet',
        },
        at: now,
      });
      r.depositedMicros = micros;
    }
    const deficit = balance < ledgerMicro ? ledgerMicro - balance : 0n;
    r.deficitMicro = deficit;
    if (deficit > 0n && deficit !== BigInt(String(w.alerted_deficit_micro))) {
      await emitEvent(tx, {
        botId,
        type: 'x402.balance_mismatch',
        data: {
          address: w.address,
          chain_balance: Number(balance) / 1e6,
          ledger_balance: Number(ledgerMicro) / 1e6,
          missing: Number(deficit) / 1e6,
          description: 'The partner wallet holds less on chain than the ledger says',
        },
        at: now,
      });
      const owner = await maybeOne<{ email: string | null; name: string }>(
        tx,
        'SELECT o.email, b.name FROM bots b LEFT JOIN owners o ON o.id = b.owner_id WHERE b.id = $1',
        [botId],
      );
      alert = { deficitMicro: deficit, ownerEmail: owner?.email ?? null, botName: owner?.name ?? botId };
    }
    await tx.query(
      `UPDATE x402_wallets SET chain_balance_micro = $2, balance_read_at = $3, reconciled_block = $4,
              alerted_deficit_micro = $5 WHERE bot_id = $1`,
      [botId, balance.toString(), new Date(now), block.number.toString(), deficit.toString()],
    );
    return r;
  });
  const a = alert as { deficitMicro: bigint; ownerEmail: string | null; botName: string } | null;
  if (a?.ownerEmail) {
    // Best effort: the event is the durable record; the mail is the nudge.
    await ctx.mailer
      .send({
        to: a.ownerEmail,
        subject: `${a.botName}: partner wallet holds less than expected`,
        text: [
          `The partner wallet ${wallet.address} of ${a.botName} holds ${(Number(balance) / 1e6).toFixed(6)} USDC on ${cfg.network},`,
          `${(Number(a.deficitMicro) / 1e6).toFixed(6)} USDC less than the service's ledger says.`,
          '',
          'Money left the wallet without a payment the service signed: check whether its key is used elsewhere.',
        ].join('\n'),
      })
      .catch((err) => ctx.logger.warn({ err }, 'could not mail the partner wallet alert'));
  }
  return result;
}

/** Every wallet with an active rail or an authorisation still open. */
export async function reconcileAll(ctx: AppContext): Promise<void> {
  if (!ctx.config.x402) return;
  const rows = await ctx.db.query<{ bot_id: string }>(
    `SELECT w.bot_id FROM x402_wallets w
      WHERE w.network = $1 AND (EXISTS (SELECT 1 FROM rails r WHERE r.bot_id = w.bot_id AND r.rail_key = 'partner_wallet' AND r.status = 'active')
         OR EXISTS (SELECT 1 FROM x402_payments p WHERE p.bot_id = w.bot_id AND p.status = 'authorized'))`,
    [ctx.config.x402.network],
  );
  for (const r of rows) {
    try {
      await reconcileWallet(ctx, r.bot_id);
    } catch (err) {
      ctx.logger.warn({ err, bot_id: r.bot_id }, 'x402 reconciliation failed');
    }
  }
}
