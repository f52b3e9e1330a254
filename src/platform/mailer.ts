import type { FastifyBaseLogger } from 'fastify';
import type { Transporter } from 'nodemailer';

export interface Mail {
  to: string;
  subject: string;
  text: string;
  html?: string;
  /**
   * Values to hide when the mail goes to the log instead of SMTP. A claim link is a secret the bot
   * already holds, so the log copy hides it; a development sign-in link is left readable on purpose.
   */
  redactInLog?: string[];
  /**
   * Without SMTP_URL, this line is also printed on its own (stderr), apart from the JSON logs: the
   * development sign-in link, which a person has to find and open.
   */
  devNotice?: string;
  /** Message-ID (without angle brackets): the same ID for a resent mail lets servers drop the copy. */
  messageId?: string;
}

/** Outgoing mail. Without SMTP_URL (development) mails are written to the log instead. */
export interface Mailer {
  send(mail: Mail): Promise<void>;
  close(): Promise<void>;
}

export function createMailer(options: {
  smtpUrl: string | undefined;
  from: string;
  logger: FastifyBaseLogger;
  /** Where development notices go without SMTP_URL (default: standard error). */
  noticeStream?: NodeJS.WritableStream;
}): Mailer {
  if (!options.smtpUrl) {
    return {
      async send(mail) {
        // Development only: the text holds sign-in and approval links, which is the point here.
        let body = mail.text;
        for (const secret of mail.redactInLog ?? []) body = body.split(secret).join('[Redacted]');
        options.logger.info(
          { mail: { to: mail.to, subject: mail.subject, body, message_id: mail.messageId } },
          'mail (no SMTP_URL set)',
        );
        if (mail.devNotice) {
          const out = options.noticeStream ?? process.stderr;
          const tty = (out as { isTTY?: boolean }).isTTY === true;
          // The address comes from whoever asked for the link: no control characters reach a terminal.
          // biome-ignore lint/suspicious/noControlCharactersInRegex: that is the point
          const line = mail.devNotice.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
          out.write(`${tty ? `\x1b[1;7m${line}\x1b[0m` : line}\n`);
        }
      },
      async close() {},
    };
  }
  const smtpUrl = options.smtpUrl;
  // nodemailer (~50 ms and ~10 MB to load) is loaded with the first mail; SMTP_URL was checked by
  // the configuration already.
  let transport: Promise<Transporter> | undefined;
  const open = () => {
    transport ??= import('nodemailer').then((nodemailer) => nodemailer.default.createTransport(smtpUrl));
    return transport;
  };
  return {
    async send(mail) {
      const { messageId, redactInLog: _redact, devNotice: _notice, ...rest } = mail;
      await (await open()).sendMail({
        from: options.from,
        ...rest,
        ...(messageId ? { messageId: `<${messageId}>` } : {}),
      });
    },
    async close() {
      (await transport)?.close();
    },
  };
}
