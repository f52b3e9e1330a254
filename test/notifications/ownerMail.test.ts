import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  deliverOwnerMail,
  OWNER_MAIL_CLOSE_WAIT_MS,
  OWNER_MAIL_LEASE_MS,
  ownerMailSettled,
} from '../../src/notifications/job.ts';
import { FakeClock } from '../../src/platform/clock.ts';
import { checkout, purchase, setupCard } from '../checkout/helpers.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import {
  activeBot,
  createOwner,
  createTestServiceWithMailOutage,
  type TestService,
} from '../support/service.ts';

// Owner mail is driven by durable rows (src/notifications/job.ts), not sent from the checkout path:
// a crash between the checkout's commit and the send loses nothing, and the mail goes out once.

let database: TestDatabase;
const clock = new FakeClock();

beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  await database.drop();
});

/** A service instance on the shared database whose mailer fails while `down` is true. */
const instance = (down: { value: boolean }) => createTestServiceWithMailOutage({ database, clock }, down);

async function heldReal(svc: TestService) {
  const owner = await createOwner(svc);
  const bot = await activeBot(svc, owner, { fundCents: 5000 });
  const card = await setupCard(svc, owner, bot.bot_id);
  const res = await checkout(svc, bot, purchase(card.real_profile_index, 250));
  expect(res.statusCode).toBe(202);
  return { owner, id: res.json().confirmation_id as string };
}

describe('owner mail from durable rows', () => {
  it('the service dies after the checkout committed and before the mail went out: the next instance sends it, once', async () => {
    const down = { value: true };
    const a = await instance(down);
    const { owner, id } = await heldReal(a);
    await ownerMailSettled(a.ctx);
    expect(a.mailer.sent).toHaveLength(0);
    // The instance goes away (its SMTP never answered); its claim lease is left behind.
    await a.app.close();

    const up = { value: false };
    const b = await instance(up);
    // Within the lease the mail is another instance's: not sent twice at once.
    expect(await deliverOwnerMail(b.ctx)).toBe(0);
    clock.advance(OWNER_MAIL_LEASE_MS + 1);
    expect(await deliverOwnerMail(b.ctx)).toBe(1);
    expect(await deliverOwnerMail(b.ctx)).toBe(0);
    const mails = b.mailer.sent.filter((m) => m.to === owner.email);
    expect(mails).toHaveLength(1);
    expect(mails[0]!.messageId).toBe(`held.${id}@localhost`);
    expect(mails[0]!.text).toContain('/approvals/one-click/approve');
    await b.app.close();
  });

  it('a failed send is retried; two instances delivering at once send each mail once', async () => {
    const down = { value: true };
    const a = await instance(down);
    const b = await instance(down);
    const held = await Promise.all([heldReal(a), heldReal(a), heldReal(a)]);
    await ownerMailSettled(a.ctx);
    clock.advance(OWNER_MAIL_LEASE_MS + 1);
    expect(await deliverOwnerMail(a.ctx)).toBe(0); // SMTP still down: retried later
    down.value = false;
    clock.advance(10_000);
    const [x, y] = await Promise.all([deliverOwnerMail(a.ctx), deliverOwnerMail(b.ctx)]);
    expect(x + y).toBe(3);
    for (const h of held) {
      const all = [...a.mailer.sent, ...b.mailer.sent].filter((m) => m.to === h.owner.email);
      expect(all, h.id).toHaveLength(1);
    }
    await a.app.close();
    await b.app.close();
  });

  it('a purchase decided before its mail went out is not mailed; a held decoy is mailed like a real hold', async () => {
    const down = { value: true };
    const a = await instance(down);
    const { owner, id } = await heldReal(a);
    const deny = await a.app.inject({
      method: 'POST',
      url: `/api/v1/owner/approvals/${id}/deny`,
      headers: owner.auth,
    });
    expect(deny.statusCode).toBe(200);
    const decoyOwner = await createOwner(a);
    const bot = await activeBot(a, decoyOwner, { fundCents: 5000 });
    const card = await setupCard(a, decoyOwner, bot.bot_id);
    expect((await checkout(a, bot, purchase(card.decoyIndex, 100))).statusCode).toBe(202);
    // The checkout's own send (sendOwnerMailSoon) fails while SMTP is down; let it end first, or on a
    // loaded machine it could still be on its way once the clock passes its lease, and both it and
    // the job below would send (at least once, by design: the Message-ID is stable).
    await ownerMailSettled(a.ctx);
    down.value = false;
    clock.advance(OWNER_MAIL_LEASE_MS + 1);
    await deliverOwnerMail(a.ctx);
    expect(a.mailer.sent.filter((m) => m.to === owner.email)).toHaveLength(0);
    // Every hold asks the owner, whatever its profile (docs/security.md): the same mail.
    const decoyMail = a.mailer.sent.filter((m) => m.to === decoyOwner.email);
    expect(decoyMail).toHaveLength(1);
    expect(decoyMail[0]?.subject).toContain('$1.00');
    expect(decoyMail[0]?.text).not.toMatch(/profile|decoy/i);
    await a.app.close();
  });

  it('a send still on its way when the service closes is finished before the database is let go', async () => {
    const svc = await instance({ value: false });
    let release = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const send = svc.mailer.send.bind(svc.mailer);
    svc.mailer.send = async (mail) => {
      await gate;
      await send(mail);
    };
    const { id } = await heldReal(svc);
    let settled = false;
    void ownerMailSettled(svc.ctx).then(() => {
      settled = true;
    });
    let closed = false;
    const closing = svc.app.close().then(() => {
      closed = true;
    });
    await new Promise((r) => setTimeout(r, 100));
    expect({ settled, closed }).toEqual({ settled: false, closed: false });
    release();
    await closing;
    expect(settled).toBe(true);
    expect(svc.mailer.sent.filter((m) => m.messageId === `held.${id}@localhost`)).toHaveLength(1);
    const [row] = await database.db.query<{ mailed: boolean }>(
      'SELECT owner_mailed_at IS NOT NULL AS mailed FROM checkout_confirmations WHERE id = $1',
      [id],
    );
    expect(row?.mailed).toBe(true);
  });

  it('an SMTP server that never answers does not hold the close: the mail stays claimed for a later send', async () => {
    const svc = await instance({ value: false });
    svc.mailer.send = () => new Promise<void>(() => {});
    const { id } = await heldReal(svc);
    const started = Date.now();
    await svc.app.close();
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(OWNER_MAIL_CLOSE_WAIT_MS - 100);
    expect(waited).toBeLessThan(OWNER_MAIL_CLOSE_WAIT_MS + 3_000);
    const [row] = await database.db.query<{ mailed: boolean; leased: boolean }>(
      `SELECT owner_mailed_at IS NOT NULL AS mailed, owner_mail_at IS NOT NULL AS leased
         FROM checkout_confirmations WHERE id = $1`,
      [id],
    );
    expect(row).toEqual({ mailed: false, leased: true });
  }, 20_000);
});
