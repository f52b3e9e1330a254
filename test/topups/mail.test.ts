import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliverOwnerMail, OWNER_MAIL_LEASE_MS } from '../../src/notifications/job.ts';
import { FakeClock } from '../../src/platform/clock.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { activeBot, createOwner, createTestServiceWithMailOutage } from '../support/service.ts';
import { ask, decide } from './helpers.ts';

// The owner's e-mail about a top-up request comes from the durable row (the owner-mail job): sent
// once, retried after an SMTP failure or a crash, stable Message-ID, not sent once decided. The SMTP
// server is the edge of the world: a capturing mailer stands in for it.

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

const settle = () => new Promise((r) => setTimeout(r, 50));

describe('top-up request mail', () => {
  it('is sent once to the owner, with the bot, amount, quoted reason and the inbox link', async () => {
    const svc = await instance({ value: false });
    try {
      const owner = await createOwner(svc);
      const bot = await activeBot(svc, owner);
      const asked = (
        await ask(svc, bot, { amount_cents: 4250, reason: 'GPU hours\r\nBcc: someone@example.com' })
      ).json();
      await settle();
      await deliverOwnerMail(svc.ctx);
      clock.advance(OWNER_MAIL_LEASE_MS + 1);
      await deliverOwnerMail(svc.ctx);
      const mails = svc.mailer.sent.filter((m) => m.messageId?.startsWith('topup.'));
      expect(mails).toHaveLength(1);
      const mail = mails[0]!;
      expect(mail.to).toBe(owner.email);
      expect(mail.subject).toMatch(/asks you for \$42\.50$/);
      expect(mail.messageId).toBe(`topup.${asked.topup_id}@localhost`);
      expect(mail.text).toContain('"GPU hours Bcc: someone@example.com"');
      expect(mail.text).toContain('http://localhost:8080/approvals');
      expect(mail.text.split('\n').some((line) => line.startsWith('Bcc:'))).toBe(false);
    } finally {
      await svc.app.close();
    }
  });

  it('an SMTP failure or a dead instance is retried; the retry keeps the Message-ID; a decided request is not mailed', async () => {
    const down = { value: true };
    const a = await instance(down);
    const owner = await createOwner(a);
    const bot = await activeBot(a, owner);
    const asked = (await ask(a, bot, { amount_cents: 100, reason: 'retry me' })).json();
    const decided = (await ask(a, bot, { amount_cents: 200, reason: 'decided first' })).json();
    await settle();
    expect(a.mailer.sent).toHaveLength(0);
    // The owner decides the second before any mail went out: no mail about it any more.
    expect((await decide(a, owner, decided.topup_id, 'decline')).statusCode).toBe(200);
    await a.app.close();

    const b = await instance({ value: false });
    try {
      clock.advance(OWNER_MAIL_LEASE_MS + 1);
      await deliverOwnerMail(b.ctx);
      await deliverOwnerMail(b.ctx);
      const mails = b.mailer.sent.filter((m) => m.messageId?.startsWith('topup.'));
      expect(mails.map((m) => m.messageId)).toEqual([`topup.${asked.topup_id}@localhost`]);
      const rows = await b.ctx.db.query<{ id: string; owner_mailed_at: Date | null }>(
        'SELECT id, owner_mailed_at FROM topup_requests WHERE id = ANY($1::text[])',
        [[asked.topup_id, decided.topup_id]],
      );
      expect(rows.find((r) => r.id === asked.topup_id)!.owner_mailed_at).not.toBeNull();
    } finally {
      await b.app.close();
    }
  });
});
