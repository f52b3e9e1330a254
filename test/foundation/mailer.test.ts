import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMailer } from '../../src/platform/mailer.ts';
import { startTestSmtp, type TestSmtp } from '../support/smtp.ts';

// With SMTP_URL, mail goes over SMTP; nodemailer is loaded with the first mail, not when the
// mailer is made (test/foundation/lazyLoading.test.ts: a started service has not loaded it).
describe('mailer over SMTP', () => {
  let smtp: TestSmtp;
  beforeAll(async () => {
    smtp = await startTestSmtp();
  });
  afterAll(async () => {
    await smtp.close();
  });

  it('sends the first and later mails, with their Message-ID, and closes', async () => {
    const mailer = createMailer({
      smtpUrl: smtp.url,
      from: 'botpay@example.com',
      logger: pino({ level: 'silent' }),
    });
    await mailer.send({ to: 'owner@example.com', subject: 'First', text: 'one', messageId: 'first@botpay' });
    await mailer.send({ to: 'owner@example.com', subject: 'Second', text: 'two' });
    await mailer.close();
    expect(smtp.inbox.map((m) => m.to)).toEqual([['owner@example.com'], ['owner@example.com']]);
    expect(smtp.inbox[0]?.raw).toMatch(/^Subject: First$/m);
    expect(smtp.inbox[0]?.raw).toMatch(/^Message-ID: <first@botpay>$/im);
    expect(smtp.inbox[1]?.raw).toMatch(/^Subject: Second$/m);
  });

  it('closing a mailer that never sent loads nothing and does not fail', async () => {
    const mailer = createMailer({
      smtpUrl: 'smtp://127.0.0.1:1',
      from: 'x@example.com',
      logger: pino({ level: 'silent' }),
    });
    await expect(mailer.close()).resolves.toBeUndefined();
  });
});
