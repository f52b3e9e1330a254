import { readFileSync, statSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { TUNNEL_TOKEN_ENV } from '../bots/tunnelSetup.ts';
import { connectUrl, describeError, EXIT_OK, EXIT_USAGE, stamp, TunnelClient } from './client.ts';

// `botpay tunnel …`: the command line of the managed-tunnel client (arguments, token, usage,
// exit codes); the client itself is client.ts.

const USAGE = `Usage: BOTPAY_TUNNEL_TOKEN=svc_tun_… botpay tunnel --server URL --port N [--path P]
       botpay tunnel --token-file FILE --server URL --port N [--path P]

Connects this machine to the Bot Payment Service so that webhooks sent to your bot's tunnel
hostname reach http://127.0.0.1:N (at the path they were sent to; P is your webhook path).

  --server URL       the service's address (BASE_URL), e.g. https://pay.example.com
                     (BOTPAY_SERVER if omitted)
  --port N           local port of your webhook receiver (1-65535)
  --path P           your webhook path, e.g. /hooks/service (shown in logs)
  --token-file FILE  a file holding the tunnel token (svc_tun_…); make it readable only by you
  --token T          the tunnel token itself: works, but every user of this machine can read
                     it in ps; prefer BOTPAY_TUNNEL_TOKEN or --token-file

The token comes from --token-file, else --token, else BOTPAY_TUNNEL_TOKEN.
Exit codes: 0 stopped, 2 bad arguments, 3 token rejected, 4 replaced by another client.`;

/**
 * The tunnel token from --token-file, --token or the environment (in that order), with warnings
 * for the ways it can leak: a token on the command line, a token file others can read.
 */
export function resolveTunnelToken(
  values: { token?: string; tokenFile?: string },
  env: NodeJS.ProcessEnv,
  warn: (line: string) => void,
): { token: string } | { problem: string } {
  if (values.tokenFile !== undefined) {
    let text: string;
    try {
      const mode = statSync(values.tokenFile).mode;
      if ((mode & 0o077) !== 0) {
        warn(
          `botpay tunnel: warning: ${values.tokenFile} can be read by other users (mode ${(mode & 0o777).toString(8)}); chmod 600 it`,
        );
      }
      text = readFileSync(values.tokenFile, 'utf8');
    } catch (error) {
      return { problem: `--token-file ${values.tokenFile} cannot be read (${describeError(error)})` };
    }
    const token = text.trim();
    if (!token) return { problem: `--token-file ${values.tokenFile} is empty` };
    return { token };
  }
  if (values.token !== undefined) {
    warn(
      `botpay tunnel: warning: --token puts the token on the command line, where every user of this machine can read it (ps); set ${TUNNEL_TOKEN_ENV} or use --token-file instead`,
    );
    if (values.token) return { token: values.token };
  }
  const fromEnv = env[TUNNEL_TOKEN_ENV]?.trim();
  if (fromEnv) return { token: fromEnv };
  return {
    problem: `the tunnel token is missing: set ${TUNNEL_TOKEN_ENV} to the tunnel_token from registration (or pass --token-file FILE)`,
  };
}

/** `botpay tunnel …`: runs until SIGINT/SIGTERM, a rejected token or a replacement. */
export async function tunnelCommand(args: string[]): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        server: { type: 'string' },
        token: { type: 'string' },
        'token-file': { type: 'string' },
        port: { type: 'string' },
        path: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    console.error(`${error instanceof Error ? error.message : error}\n\n${USAGE}`);
    return EXIT_USAGE;
  }
  if (values.help) {
    console.log(USAGE);
    return EXIT_OK;
  }
  const server = (values.server as string | undefined) ?? process.env.BOTPAY_SERVER ?? process.env.BASE_URL;
  const resolved = resolveTunnelToken(
    { token: values.token as string | undefined, tokenFile: values['token-file'] as string | undefined },
    process.env,
    (line) => console.error(line),
  );
  const token = 'token' in resolved ? resolved.token : undefined;
  const portText = values.port as string | undefined;
  const problems: string[] = [];
  if (!server) problems.push('--server is required (the service address, e.g. https://pay.example.com)');
  else {
    try {
      connectUrl(server);
    } catch (error) {
      problems.push((error as Error).message);
    }
  }
  if ('problem' in resolved) problems.push(resolved.problem);
  const port = Number(portText);
  if (!portText || !/^\d+$/.test(portText) || port < 1 || port > 65535) {
    problems.push('--port must be a port number between 1 and 65535');
  }
  const path = values.path as string | undefined;
  if (path !== undefined && !path.startsWith('/')) problems.push('--path must start with /');
  if (problems.length > 0) {
    console.error(`botpay tunnel: ${problems.join('; ')}\n\n${USAGE}`);
    return EXIT_USAGE;
  }

  // Both present: a missing one is among the problems above.
  if (!server || !token) return EXIT_USAGE;
  const client = new TunnelClient({
    server,
    token,
    port,
    path,
    log: bufferedStdout(),
  });
  console.log(`${stamp()} tunnel: connecting to ${connectUrl(server)} (forwarding to 127.0.0.1:${port})`);
  const onSignal = () => void client.stop();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const exit = await client.run();
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  if (exit.code !== EXIT_OK) console.error(`botpay tunnel: ${exit.message}`);
  return exit.code;
}

/**
 * Console output, one line per call, written at most every LOG_FLUSH_MS (a busy tunnel logs
 * thousands of lines a second: one write each, or even one per event-loop turn, costs the relay
 * path CPU). The pending timer keeps the process alive until the last lines are out.
 */
export function bufferedStdout(
  write: (text: string) => void = (text) => process.stdout.write(text),
): (line: string) => void {
  let pending = '';
  const flush = () => {
    const text = pending;
    pending = '';
    write(text);
  };
  return (line) => {
    if (pending === '') setTimeout(flush, LOG_FLUSH_MS);
    pending += `${line}\n`;
  };
}

/** How long a log line may wait to be written with the ones after it. */
export const LOG_FLUSH_MS = 50;
