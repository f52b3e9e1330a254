// The example bot: registers (or reuses saved credentials), hands the claim link to its owner,
// waits for the claim, receives signed webhooks, reports its wallet, fulfils tasks and buys
// something. Everything it does goes through the SDK in packages/client.
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { BotPayClient, type CheckoutRequest, isBotPayError } from '../../packages/client/src/index.ts';
import { type BotPayTunnel, openTunnel } from '../../packages/client/src/tunnel/index.ts';
import { createNodeWebhookHandler } from '../../packages/client/src/webhooks/index.ts';
import type { WebhookReceiverOptions } from '../../packages/client/src/webhooks/receiver.ts';

export interface BotOptions {
  baseUrl: string;
  botName: string;
  ownerEmail?: string;
  pairingCode?: string;
  /** Where credentials are kept between runs (written with mode 0600). */
  stateFile: string;
  /**
   * `direct`: the service posts to http://127.0.0.1:<port>/webhook (the service must allow private
   * webhook targets, ALLOW_PRIVATE_WEBHOOK_TARGETS=true). `tunnel`: no callback URL; the service
   * provisions a managed tunnel (see `tunnel`).
   */
  receiver: 'direct' | 'tunnel';
  receiverPort: number;
  /**
   * In tunnel mode, how webhooks reach the bot. `sdk` (default): the SDK opens the tunnel in this
   * process (`openTunnel` from `@botpay/client/tunnel`), no other program to run. `print`: print
   * the tunnel client command for you to run (`botpay tunnel`, for bots in other languages).
   * `spawn`: run that command as a child process.
   */
  tunnel?: 'sdk' | 'print' | 'spawn';
  /** A purchase to make once active (e.g. from BUY_* variables). */
  purchase?: CheckoutRequest;
  /** How often to check whether the owner has claimed the bot. Default 5 s. */
  claimPollMs?: number;
  /** Stop after the setup, tasks and purchase instead of listening for webhooks until stopped. */
  once?: boolean;
  log?: (line: string) => void;
  signal?: AbortSignal;
  /** Client options for tests (sleep, now). */
  clientSleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

export interface SavedState {
  base_url: string;
  bot_id: string;
  api_key: string;
  webhook_secret: string;
  owner_verification_url?: string;
  receiver: 'direct' | 'tunnel';
  receiver_port: number;
  tunnel_client_command?: string;
  /** The client reads it from BOTPAY_TUNNEL_TOKEN; it is not part of the command. */
  tunnel_token?: string;
}

export interface RunningBot {
  /** Resolves when the bot has finished (with `once`) or has been stopped. */
  done: Promise<void>;
  /** The port the webhook receiver listens on. */
  receiverPort(): number | undefined;
  stop(): Promise<void>;
}

const WEBHOOK_PATH = '/webhook';

export function runBot(options: BotOptions): RunningBot {
  const log = options.log ?? ((line: string) => console.log(line));
  const controller = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, controller.signal]) : controller.signal;
  let server: Server | undefined;
  let tunnel: ChildProcess | undefined;
  let sdkTunnel: BotPayTunnel | undefined;

  const done = (async () => {
    const service = new BotPayClient({
      baseUrl: options.baseUrl,
      ...(options.clientSleep ? { sleep: options.clientSleep } : {}),
    });
    // The receiver listens first, so that the port registered (callback URL or tunnel port) is
    // the one really bound, even when the operating system picked it.
    const saved = await readState(options.stateFile);
    const receiver = await startReceiver(saved?.receiver_port ?? options.receiverPort, log);
    server = receiver.server;
    const state = await loadOrRegister(service, saved, receiver.port, options, log);
    receiver.setSecret(state.webhook_secret);
    const bot = service.withApiKey(state.api_key);
    if (state.receiver === 'tunnel' && state.tunnel_client_command) {
      const mode = options.tunnel ?? 'sdk';
      if (mode === 'sdk') {
        sdkTunnel = openTunnel({
          server: options.baseUrl,
          token: state.tunnel_token ?? '',
          webhooks: webhookOptions(state.webhook_secret, log),
          log: (line) => log(`tunnel: ${maskTunnelToken(line)}`),
        });
      } else if (mode === 'spawn') {
        tunnel = startTunnelClient(state.tunnel_client_command, state.tunnel_token ?? '', log);
      } else {
        // The command passes the token in BOTPAY_TUNNEL_TOKEN; it is masked here (the state file has it).
        log(
          `tunnel: run the tunnel client and keep it running: ${maskTunnelToken(state.tunnel_client_command)} ` +
            `(tunnel_token is in ${options.stateFile})`,
        );
      }
    }

    let status = await bot.status({ signal });
    if (status.status === 'pending') {
      log(`claim link: ${state.owner_verification_url ?? '(none saved: ask your owner to pair the bot)'}`);
      log('waiting for the owner to claim this bot…');
      while (status.status === 'pending') {
        await sleep(options.claimPollMs ?? 5_000, signal);
        status = await bot.status({ signal });
      }
      log(`claimed: status ${status.status}`);
    }
    const wallet = await bot.walletCheck({ signal });
    log(
      `status ${status.status}, wallet ${wallet.wallet_status}, balance $${wallet.balance_usd.toFixed(2)}, ` +
        `card ${wallet.card_status}, ${status.pending_messages ?? 0} queued events`,
    );

    await fulfilTasks(bot, log, signal);
    if (options.purchase) await buy(bot, options.purchase, log, signal);

    if (!options.once) {
      log(`listening for webhooks on 127.0.0.1:${(server.address() as AddressInfo).port}${WEBHOOK_PATH}`);
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
    }
  })().finally(async () => {
    tunnel?.kill();
    await sdkTunnel?.close();
    await closeServer(server);
  });

  // Marked as handled here; callers still see the rejection through `done`.
  done.catch(() => {});
  return {
    done,
    receiverPort: () => (server?.address() as AddressInfo | null)?.port,
    async stop() {
      controller.abort(new Error('stopped'));
      await done.catch(() => {});
    },
  };
}

async function loadOrRegister(
  service: BotPayClient,
  saved: SavedState | undefined,
  port: number,
  options: BotOptions,
  log: (line: string) => void,
): Promise<SavedState> {
  if (saved && saved.base_url === service.baseUrl) {
    log(`reusing saved credentials for ${saved.bot_id} (${options.stateFile})`);
    return saved;
  }
  if (!options.ownerEmail)
    throw new Error('OWNER_EMAIL is required for the first run (to register the bot).');
  const reg = await service.register({
    bot_name: options.botName,
    owner_email: options.ownerEmail,
    description: 'Example bot from the Bot Payment Service repository',
    ...(options.pairingCode ? { pairing_code: options.pairingCode } : {}),
    ...(options.receiver === 'direct'
      ? { callback_url: `http://127.0.0.1:${port}${WEBHOOK_PATH}` }
      : { bot_type: 'example', local_port: port, webhook_path: WEBHOOK_PATH }),
  });
  if (!reg.webhook_secret) throw new Error('The registration returned no webhook_secret.');
  const state: SavedState = {
    base_url: service.baseUrl,
    bot_id: reg.bot_id,
    api_key: reg.api_key,
    webhook_secret: reg.webhook_secret,
    ...(reg.owner_verification_url ? { owner_verification_url: reg.owner_verification_url } : {}),
    receiver: options.receiver,
    receiver_port: port,
    ...(reg.tunnel_setup
      ? {
          tunnel_client_command: String(reg.tunnel_setup.tunnel_client_command),
          tunnel_token: String(reg.tunnel_setup.tunnel_token),
        }
      : {}),
  };
  // Written before anything else: the api_key and webhook_secret are shown only once.
  await writeState(options.stateFile, state);
  log(`registered ${reg.bot_id} (${reg.status}); credentials saved to ${options.stateFile}`);
  return state;
}

async function startReceiver(port: number, log: (line: string) => void) {
  let handler: ReturnType<typeof createNodeWebhookHandler> | undefined;
  const server = createServer((req, res) => {
    if (req.url?.split('?')[0] !== WEBHOOK_PATH) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not_found"}');
    } else if (!handler) {
      // Not registered yet: the service retries later.
      res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"starting"}');
    } else handler(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  log(`webhook receiver on http://127.0.0.1:${bound}${WEBHOOK_PATH}`);
  return {
    server,
    port: bound,
    setSecret(secret: string) {
      handler = createNodeWebhookHandler(webhookOptions(secret, log));
    },
  };
}

/** One way to handle a webhook, whether it comes to the local receiver or through the SDK's tunnel. */
function webhookOptions(secret: string, log: (line: string) => void): WebhookReceiverOptions {
  return {
    secret,
    onEvent: (event) => {
      log(`webhook ${event.event} ${event.id} ${JSON.stringify(event.data)}`);
    },
    onError: (error, event) => log(`webhook handler failed for ${event.id}: ${String(error)}`),
  };
}

async function fulfilTasks(bot: BotPayClient, log: (line: string) => void, signal: AbortSignal) {
  for (let handled = 0; handled < 10; handled++) {
    let next: Awaited<ReturnType<BotPayClient['nextTask']>>;
    try {
      next = await bot.nextTask({ signal });
    } catch (error) {
      if (isBotPayError(error, 'not_found')) {
        log('tasks: this service has no task endpoint');
        return;
      }
      throw error;
    }
    if (!next.has_task || !next.instructions || !next.task_id) {
      log(`tasks: ${next.message ?? 'none'}`);
      return;
    }
    log(`task ${next.task_id}: ${next.instructions.item_name} at ${next.instructions.merchant_name}`);
    await buy(bot, { ...next.instructions, task_id: next.task_id }, log, signal);
  }
}

async function buy(
  bot: BotPayClient,
  request: CheckoutRequest,
  log: (line: string) => void,
  signal: AbortSignal,
) {
  const what = `${request.item_name} for $${(request.amount_cents / 100).toFixed(2)} (profile ${request.profile_index})`;
  try {
    const result = await bot.checkout(request, { signal });
    if (result.approved) {
      log(`purchase approved at once: ${what}, ${result.confirmation_id}; card details received`);
      return;
    }
    log(`purchase pending owner approval: ${what}, ${result.confirmation_id}, expires ${result.expires_at}`);
    const decision = await bot.waitForDecision(result.confirmation_id, { signal });
    log(
      decision.status === 'approved'
        ? `purchase approved by the owner: ${result.confirmation_id}; card details received`
        : `purchase ${decision.status}: ${result.confirmation_id}`,
    );
  } catch (error) {
    if (!isBotPayError(error) || error.isAuthentication) throw error;
    // Card details are never logged; refusals are, with what the service said.
    log(`purchase refused: ${what}: ${error.code} (${error.message})`);
  }
}

const BOTPAY_BIN = fileURLToPath(new URL('../../bin/botpay.mjs', import.meta.url));

export function maskTunnelToken(command: string): string {
  return command.replace(/svc_tun_[0-9a-f]+/g, 'svc_tun_…');
}

/**
 * Runs `tunnel_client_command` with this repository's CLI (`botpay` → `node bin/botpay.mjs`), and
 * logs what the client prints, with the token masked.
 */
function startTunnelClient(command: string, token: string, log: (line: string) => void): ChildProcess {
  // BOTPAY_TUNNEL_TOKEN=<token> botpay tunnel …: the token goes into the client's environment.
  const words = command.split(' ');
  if (words[0]?.startsWith('BOTPAY_TUNNEL_TOKEN=')) words.shift();
  const [program, ...args] = words;
  if (program !== 'botpay') throw new Error(`unexpected tunnel client command: ${maskTunnelToken(command)}`);
  const child = spawn(process.execPath, [BOTPAY_BIN, ...args], {
    env: { ...process.env, BOTPAY_TUNNEL_TOKEN: token },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  log(`tunnel: started the tunnel client (pid ${child.pid})`);
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream }).on('line', (line) => log(`tunnel: ${maskTunnelToken(line)}`));
  }
  child.on('exit', (code, signal) => log(`tunnel: client exited (${signal ?? `code ${code}`})`));
  return child;
}

async function readState(file: string): Promise<SavedState | undefined> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as SavedState;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

async function writeState(file: string, state: SavedState): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
}

/** Waits `ms`, or until the signal aborts; the abort listener goes away either way (one per poll would pile up). */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function closeServer(server: Server | undefined): Promise<void> {
  if (!server?.listening) return Promise.resolve();
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}
