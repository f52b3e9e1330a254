import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { SMTPServer } from 'smtp-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMailer } from '../../src/platform/mailer.ts';

// With SMTP_URL, mail goes over SMTP; nodemailer is loaded with the first mail, not when the
// mailer is made (test/foundation/lazyLoading.test.ts: a started service has not loaded it).
describe('mailer over SMTP', () => {
  let smtp: SMTPServer;
  const inbox: { to: string[]; raw: string }[] = [];
  beforeAll(async () => {
    smtp = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS', 'AUTH'],
      logger: false,
      onData(stream, session, callback) {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => {
          inbox.push({
            to: session.envelope.rcptTo.map((r) => r.address),
            raw: Buffer.concat(chunks).toString(),
          });
          callback();
        });
      },
    });
    await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => smtp.close(() => resolve()));
  });

  it('sends the first and later mails, with their Message-ID, and closes', async () => {
    const port = (smtp.server.address() as AddressInfo).port;
    const mailer = createMailer({
      smtpUrl: `smtp://127.0.0.1:${port}?ignoreTLS=true`,
      from: 'botpay@example.com',
      logger: pino({ level: 'silent' }),
    });
    await mailer.send({ to: 'owner@example.com', subject: 'First', text: 'one', messageId: 'first@botpay' });
    await mailer.send({ to: 'owner@example.com', subject: 'Second', text: 'two' });
    await mailer.close();
    expect(inbox.map((m) => m.to)).toEqual([['owner@example.com'], ['owner@example.com']]);
    expect(inbox[0]?.raw).toMatch(/^Subject: First$/m);
    expect(inbox[0]?.raw).toMatch(/^Message-ID: <first@botpay>$/im);
    expect(inbox[1]?.raw).toMatch(/^Subject: Second$/m);
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
