import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

// A real SMTP server on loopback for tests of the mail path (smtp-server, no TLS, no auth): the
// service's mailer speaks SMTP to it exactly as to a real relay, and every message lands in
// `inbox` with its envelope recipients and raw text.

export interface ReceivedMail {
  to: string[];
  raw: string;
}

export interface TestSmtp {
  port: number;
  /** SMTP_URL for the service's mailer. */
  url: string;
  inbox: ReceivedMail[];
  /** The first mail to `to` after the first `after` of the inbox; waits for it (15 s at most). */
  nextMail(to: string, after: number): Promise<ReceivedMail>;
  close(): Promise<void>;
}

export async function startTestSmtp(): Promise<TestSmtp> {
  const inbox: ReceivedMail[] = [];
  const waiters: Array<() => void> = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        inbox.push({
          to: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks).toString('utf8'),
        });
        for (const w of waiters.splice(0)) w();
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.server.address() as AddressInfo).port;
  return {
    port,
    url: `smtp://127.0.0.1:${port}?ignoreTLS=true`,
    inbox,
    async nextMail(to, after) {
      const deadline = Date.now() + 15_000;
      for (;;) {
        const found = inbox.slice(after).find((m) => m.to.includes(to));
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`no mail to ${to} arrived`);
        await new Promise<void>((resolve) => {
          waiters.push(resolve);
          setTimeout(resolve, 250);
        });
      }
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
