import { closeSync, constants, openSync, unlinkSync, writeSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { buildSplit, type CardStart, checkCardholderInput } from './split.ts';
import { present } from '../platform/present.ts';

// `botpay card split`: the card wizard for owners who use the API. It reads the card number from
// standard input (never from the command line, never logged, not echoed on a terminal), builds the
// bot's payment profiles file here with src/cards/split.ts, creates the output file (mode 0600,
// never overwriting) before the service is asked to activate, sends only the activation request
// (three digits per profile), then writes the file. The number never leaves this process.

const USAGE = `Usage: botpay card split --bot BOT_ID (--card CARD_ID | --label TEXT) --out FILE
         --expiry MM/YYYY --name "NAME ON CARD" --address-line1 TEXT [--address-line2 TEXT]
         --city TEXT [--state TEXT] --postal-code TEXT --country CC [--different-card]

Reads the card number from standard input. BOTPAY_URL (default http://localhost:8080) and
BOTPAY_OWNER_TOKEN (an owner API token: botpay owner token create) say where and as whom.`;

async function readNumber(): Promise<string> {
  const input = process.stdin;
  if (input.isTTY) {
    process.stderr.write('Card number (not shown): ');
    input.setRawMode(true);
    return new Promise((resolve, reject) => {
      let typed = '';
      const onData = (chunk: Buffer) => {
        for (const ch of chunk.toString('utf8')) {
          if (ch === '\u0003') {
            input.setRawMode(false);
            reject(new Error('cancelled'));
            return;
          }
          if (ch === '\r' || ch === '\n') {
            input.setRawMode(false);
            input.off('data', onData);
            input.pause();
            process.stderr.write('\n');
            resolve(typed);
            return;
          }
          if (ch === '\u007f') typed = typed.slice(0, -1);
          else typed += ch;
        }
      };
      input.on('data', onData);
      input.resume();
    });
  }
  let text = '';
  for await (const chunk of input) text += chunk;
  return text.trim().split('\n')[0] ?? '';
}

async function api(url: string, token: string, path: string, body: unknown) {
  const res = await fetch(new URL(path, url), {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  return { status: res.status, json };
}

export async function cardCommand(args: string[]): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    console.log(USAGE);
    return 0;
  }
  if (args[0] !== 'split') {
    console.error(USAGE);
    return 2;
  }
  let values: Record<string, string | undefined>;
  let differentCard = false;
  try {
    const parsed = parseArgs({
      args: args.slice(1),
      options: Object.fromEntries(
        [
          'bot',
          'card',
          'label',
          'out',
          'expiry',
          'name',
          'address-line1',
          'address-line2',
          'city',
          'state',
          'postal-code',
          'country',
        ]
          .map((k): [string, { type: 'string' | 'boolean' }] => [k, { type: 'string' }])
          .concat([['different-card', { type: 'boolean' }]]),
      ),
    }).values;
    differentCard = parsed['different-card'] === true;
    const { 'different-card': _flag, ...strings } = parsed;
    values = strings as Record<string, string | undefined>;
  } catch (error) {
    console.error(`${error instanceof Error ? error.message : error}\n\n${USAGE}`);
    return 2;
  }
  const missing = ['bot', 'out', 'expiry', 'name', 'address-line1', 'city', 'postal-code', 'country'].filter(
    (k) => !values[k]?.trim(),
  );
  if (missing.length > 0) {
    console.error(`Missing ${missing.map((m) => `--${m}`).join(', ')}.\n\n${USAGE}`);
    return 2;
  }
  // Present: checked just above.
  const need = (k: string): string => present(values[k], `--${k}`);
  const expiry = /^(\d{1,2})\/(\d{2}|\d{4})$/.exec(need('expiry').trim());
  const [, month, year] = expiry ?? [];
  if (!month || !year) {
    console.error('--expiry must be MM/YYYY (or MM/YY).');
    return 2;
  }
  const token = process.env.BOTPAY_OWNER_TOKEN;
  if (!token) {
    console.error(
      'Set BOTPAY_OWNER_TOKEN to an owner API token (botpay owner token create --email you@example.com).',
    );
    return 2;
  }
  const url = process.env.BOTPAY_URL ?? 'http://localhost:8080';
  const input = {
    number: '',
    expiry_month: month,
    expiry_year: year.length === 2 ? `20${year}` : year,
    cardholder_name: need('name'),
    billing_address: {
      line1: need('address-line1'),
      line2: values['address-line2'] ?? '',
      city: need('city'),
      state: values.state ?? '',
      postal_code: need('postal-code'),
      country: need('country'),
    },
  };
  input.number = await readNumber();
  // Check the card before anything is created, with a placeholder start (0-based positions 9–11).
  const preview: CardStart = {
    card_id: 'preview',
    bot_id: need('bot'),
    real_profile_index: 1,
    missing_digit_positions: [9, 10, 11],
  };
  const problem = checkCardholderInput(input, preview, new Date());
  if (problem) {
    console.error(problem);
    return 1;
  }
  // The output file exists (empty, 0600) before the service hears anything.
  const out = need('out');
  let fd: number;
  try {
    fd = openSync(out, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    console.error(
      code === 'EEXIST'
        ? `${values.out} already exists: choose another --out (nothing was done).`
        : `Cannot create ${values.out}: ${code}`,
    );
    return 1;
  }
  let done = false;
  try {
    let start: CardStart;
    if (values.card) {
      const res = await fetch(new URL(`/api/v1/owner/bots/${values.bot}/cards/${values.card}`, url), {
        headers: { authorization: `Bearer ${token}` },
      });
      const card = (await res.json().catch(() => ({}))) as Record<string, unknown>;
      if (res.status !== 200) {
        console.error(`The service answered ${res.status}: ${card.message ?? card.error ?? 'no message'}`);
        return 1;
      }
      start = card as unknown as CardStart;
    } else {
      const res = await api(
        url,
        token,
        `/api/v1/owner/bots/${values.bot}/cards`,
        values.label ? { label: values.label } : {},
      );
      if (res.status !== 201) {
        console.error(
          `The service answered ${res.status}: ${res.json.message ?? res.json.error ?? 'no message'}`,
        );
        return 1;
      }
      start = res.json as unknown as CardStart;
    }
    const { file, activation } = buildSplit(input, start, new Date());
    const res = await api(
      url,
      token,
      `/api/v1/owner/bots/${values.bot}/cards/${start.card_id}/activate`,
      differentCard ? { ...activation, different_card: true } : activation,
    );
    if (res.status !== 200) {
      console.error(
        `The service refused the activation (${res.status}): ${res.json.message ?? res.json.error ?? 'no message'}`,
      );
      if (res.json.error === 'possible_same_card') {
        console.error(
          `Nothing was written. The same card: give card ${start.card_id} that card's profiles (POST /api/v1/owner/bots/${values.bot}/cards/${start.card_id}/same-card {"same_card_as": "${String(res.json.card_id)}"}, or the dashboard) and copy that card's file. A different card: run this again with --card ${start.card_id} --different-card.`,
        );
      }
      return 1;
    }
    writeSync(fd, `${JSON.stringify(file, null, 2)}\n`);
    done = true;
    console.log(
      `Card ${start.card_id} is active. Give ${values.out} to your bot and keep no other copy: the service never had it and cannot give it again.`,
    );
    return 0;
  } catch (error) {
    console.error(
      `The service could not be reached at ${url}: ${error instanceof Error ? error.message : error}`,
    );
    return 1;
  } finally {
    closeSync(fd);
    // Nothing half-done stays behind: without an activation there is no file.
    if (!done) unlinkSync(out);
  }
}
