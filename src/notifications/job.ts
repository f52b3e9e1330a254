import { intervalJob } from '../jobs/runner.ts';
import type { AppContext } from '../platform/context.ts';
import type { Mail } from '../platform/mailer.ts';
import { balanceLowMail, heldPurchaseMail, topupRequestMail } from './ownerMail.ts';

// The owner-mail job: mails owners about purchases held for approval (on every profile alike), wallet.balance_low
// events and top-up requests, from the rows the checkout wrote in its own transaction. Rows are claimed with FOR UPDATE
// SKIP LOCKED and a lease (owner_mail_at), so instances never send the same mail at once; a mail
// is marked sent (owner_mailed_at) only after the SMTP server took it, so a crash or a failed send
// is retried — at least once, with a stable Message-ID for the receiving server to drop a copy.

/** How long a claimed mail is left to its sender before another instance may send it. */
export const OWNER_MAIL_LEASE_MS = 30_000;
/** A failed send is retried after this long (doubling up to the lease). */
const RETRY_MS = 5_000;
const BATCH = 20;

interface Source {
  table: 'checkout_confirmations' | 'events' | 'topup_requests';
  where: string;
  build: (ctx: AppContext, id: string) => Promise<Mail | null>;
}

const SOURCES: Source[] = [
  {
    table: 'checkout_confirmations',
    where: `status = 'pending' AND owner_mailed_at IS NULL`,
    build: heldPurchaseMail,
  },
  {
    // Only recent crossings: a low balance from long ago is not news.
    table: 'events',
    where: `type = 'wallet.balance_low' AND owner_mailed_at IS NULL AND created_at > $2::timestamptz - interval '1 day'`,
    build: balanceLowMail,
  },
  {
    // A bot asking for funds (src/topups/); a request decided or expired before the mail went out is not mailed.
    table: 'topup_requests',
    where: `status = 'pending' AND owner_mailed_at IS NULL`,
    build: topupRequestMail,
  },
];

/** Sends the owner mails that are due; returns how many were sent. Safe on several instances. */
export async function deliverOwnerMail(ctx: AppContext): Promise<number> {
  let sent = 0;
  for (const source of SOURCES) {
    const now = ctx.clock.now();
    const claimed = await ctx.db.query<{ id: string }>(
      `UPDATE ${source.table} SET owner_mail_at = $1
        WHERE id IN (SELECT id FROM ${source.table}
                      WHERE ${source.where} AND (owner_mail_at IS NULL OR owner_mail_at <= $2)
                      ORDER BY created_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
        RETURNING id`,
      [new Date(now + OWNER_MAIL_LEASE_MS), new Date(now)],
    );
    for (const { id } of claimed) {
      try {
        const mail = await source.build(ctx, id);
        if (mail) await ctx.mailer.send(mail);
        await ctx.db.query(`UPDATE ${source.table} SET owner_mailed_at = $2 WHERE id = $1`, [
          id,
          new Date(ctx.clock.now()),
        ]);
        if (mail) sent++;
      } catch (err) {
        ctx.logger.warn({ err, mail_for: id }, 'owner e-mail failed; it will be retried');
        await ctx.db.query(`UPDATE ${source.table} SET owner_mail_at = $2 WHERE id = $1`, [
          id,
          new Date(ctx.clock.now() + RETRY_MS),
        ]);
      }
    }
  }
  return sent;
}

const inFlight = new WeakMap<AppContext, Set<Promise<void>>>();

/**
 * Sends the owner mail a commit has just made due, without making the request wait for SMTP. The
 * job retries whatever this misses (a failure, a crash). The send is tracked, so the app waits
 * for it on close rather than closing the database under it (ownerMailSettled).
 */
export function sendOwnerMailSoon(ctx: AppContext): void {
  let running = inFlight.get(ctx);
  if (!running) {
    running = new Set();
    inFlight.set(ctx, running);
  }
  const set = running;
  const send: Promise<void> = deliverOwnerMail(ctx).then(
    () => undefined,
    (err) => ctx.logger.warn({ err }, 'owner e-mail delivery failed'),
  );
  set.add(send);
  void send.finally(() => set.delete(send));
}

/** How long closing the app waits for sends on their way (an SMTP server that stalls is not waited for). */
export const OWNER_MAIL_CLOSE_WAIT_MS = 5_000;

/**
 * Resolves once every send started by sendOwnerMailSoon has ended, or after `waitMs`. While one
 * runs it holds row locks on what it mails about, which work claimed with SKIP LOCKED passes over
 * for that moment. A send still running after `waitMs` keeps its claim lease: the job (here after a
 * restart, or on another instance) sends it once the lease ends.
 */
export async function ownerMailSettled(ctx: AppContext, waitMs = Number.POSITIVE_INFINITY): Promise<void> {
  const running = inFlight.get(ctx);
  if (!running || running.size === 0) return;
  const all = Promise.all([...running]);
  if (!Number.isFinite(waitMs)) {
    await all;
    return;
  }
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, waitMs);
  });
  await Promise.race([all, late]);
  clearTimeout(timer);
}

/** Every second on worker instances; checkout also sends right after a commit that needs mail (sendOwnerMailSoon). */
export const ownerMailJob = intervalJob('owner-mail', 'worker', 1_000, async (ctx) => {
  await deliverOwnerMail(ctx);
});
