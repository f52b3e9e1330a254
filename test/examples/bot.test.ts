import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBot } from '../../examples/bot/bot.ts';
import { signPayload, signStandard } from '../../packages/client/src/webhooks/verify.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { realCardNumber, splitCard } from '../support/cards.ts';
import type { CardStart } from '../../src/cards/split.ts';
import { FakeClock } from '../../src/platform/clock.ts';
import { DeliveryWorker } from '../../src/webhooks/worker.ts';

// The example bot against the real service on loopback: what it prints is what a developer sees.

function lines() {
  const out: string[] = [];
  const waiters: Array<{ pattern: RegExp; resolve: (line: string) => void }> = [];
  return {
    out,
    log: (line: string) => {
      out.push(line);
      for (const w of [...waiters]) {
        if (w.pattern.test(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
      }
    },
    waitFor(pattern: RegExp): Promise<string> {
      const found = out.find((l) => pattern.test(l));
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        waiters.push({ pattern, resolve });
        setTimeout(() => reject(new Error(`no line matching ${pattern}; got:\n${out.join('\n')}`)), 15_000);
      });
    },
  };
}

/** A line of examples/bot/README.md's output samples as a pattern: ids, paths and ports vary. */
function samplePattern(sample: string): RegExp {
  return new RegExp(
    `^${sample
      .replace('/…/examples/bot/.state/bot.json', '…') // the test keeps its state in a temp dir
      .replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
      .replace(/…/g, '.*?')
      .replace(/18080|8080/g, '\\d+')
      .replace(/balance \\\$0\\\.00/, 'balance \\$\\d+\\.\\d\\d')
      .replace(/, 0 queued events/, ', \\d+ queued events')}$`,
  );
}

/** The owner claims the bot with its claim token and funds its wallet (the owner API). */
async function claimAndFund(
  service: TestService,
  owner: { auth: Record<string, string> },
  claimToken: string | null,
  botId: string,
  amountCents: number,
): Promise<void> {
  const claimed = await service.app.inject({
    method: 'POST',
    url: '/api/v1/owner/claims',
    headers: owner.auth,
    payload: { claim_token: claimToken },
  });
  expect(claimed.statusCode).toBe(200);
  const funded = await service.app.inject({
    method: 'POST',
    url: `/api/v1/owner/bots/${botId}/wallet/fund`,
    headers: owner.auth,
    payload: { amount_cents: amountCents },
  });
  expect(funded.statusCode).toBe(200);
}

describe('example bot', () => {
  let svc: TestService;
  let baseUrl: string;
  let dir: string;
  beforeAll(async () => {
    svc = await createTestService({ env: { REGISTRATION_RATE_LIMIT_PER_HOUR: '1000' } });
    baseUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
    dir = await mkdtemp(join(tmpdir(), 'botpay-example-'));
  });
  afterAll(async () => {
    await svc?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('registers, prints the claim link, waits for the claim, reports the wallet and receives webhooks', async () => {
    const owner = await createOwner(svc);
    const stateFile = join(dir, 'state.json');
    const output = lines();
    const bot = runBot({
      baseUrl,
      botName: 'example',
      ownerEmail: owner.email,
      stateFile,
      receiver: 'direct',
      receiverPort: 0,
      claimPollMs: 20,
      log: output.log,
    });
    try {
      const registered = await output.waitFor(/^registered bot_/);
      const botId = /registered (bot_[a-z2-7]+)/.exec(registered)![1]!;
      const claimLine = await output.waitFor(/^claim link: /);
      const token = new URL(claimLine.slice('claim link: '.length)).searchParams.get('token');
      expect(token).toMatch(/^svc_claim_/);
      await output.waitFor(/^waiting for the owner/);

      // The owner claims and funds in the dashboard (here: the owner API).
      await claimAndFund(svc, owner, token, botId, 2500);

      await output.waitFor(/^claimed: status active$/);
      await output.waitFor(/^status active, wallet active, balance \$(0|25)\.00/);
      await output.waitFor(/^listening for webhooks/);

      // The state file holds the credentials, readable only by the bot's user.
      const state = JSON.parse(await readFile(stateFile, 'utf8'));
      expect(state).toMatchObject({ bot_id: botId, receiver: 'direct' });
      expect((await stat(stateFile)).mode & 0o777).toBe(0o600);

      // A delivery signed the way the service signs it is logged once; a forged one is refused.
      const body = JSON.stringify({
        id: 'evt_example1',
        event: 'wallet.funded',
        timestamp: new Date().toISOString(),
        bot_id: botId,
        // The shape the service sends (src/owners/service.ts, fundBot).
        data: {
          funding_id: 'fund_example1',
          amount: 25,
          balance: 25,
          description: 'Owner added $25.00 to the wallet',
        },
      });
      const url = `http://127.0.0.1:${bot.receiverPort()}/webhook`;
      const at = Math.floor(Date.now() / 1000);
      const headers = {
        'content-type': 'application/json',
        'x-service-signature': signPayload(body, state.webhook_secret),
        'webhook-id': 'evt_example1',
        'webhook-timestamp': String(at),
        'webhook-signature': signStandard(body, state.webhook_secret, 'evt_example1', at),
      };
      expect((await fetch(url, { method: 'POST', body, headers })).status).toBe(200);
      expect((await fetch(url, { method: 'POST', body, headers })).status).toBe(200);
      const forged = {
        ...headers,
        'x-service-signature': signPayload(body, 'whsec_wrong'),
        'webhook-signature': signStandard(body, 'whsec_wrong', 'evt_example1', at),
      };
      expect((await fetch(url, { method: 'POST', body, headers: forged })).status).toBe(401);
      await output.waitFor(/^webhook wallet\.funded evt_example1 /);
      expect(output.out.filter((l) => l.startsWith('webhook wallet.funded evt_example1'))).toHaveLength(1);
      // What examples/bot/README.md shows is what the bot prints (numbers and addresses aside).
      const readme = await readFile(join(process.cwd(), 'examples/bot/README.md'), 'utf8');
      // Output samples are the fences without an info string.
      const samples: string[] = [];
      let fence: 'output' | 'code' | undefined;
      for (const line of readme.split('\n')) {
        if (line.startsWith('```')) fence = fence ? undefined : line === '```' ? 'output' : 'code';
        else if (fence === 'output' && line.trim()) samples.push(line);
      }
      expect(samples.length).toBeGreaterThanOrEqual(9);
      for (const sample of samples) {
        const pattern = samplePattern(sample);
        expect(
          output.out.some((line) => pattern.test(line)),
          `README sample "${sample}" not printed; got:\n${output.out.join('\n')}`,
        ).toBe(true);
      }
      // No secret is ever printed.
      expect(output.out.join('\n')).not.toContain(state.api_key);
      expect(output.out.join('\n')).not.toContain(state.webhook_secret);
    } finally {
      await bot.stop();
    }

    // A restart reuses the saved credentials instead of registering again.
    const again = lines();
    const second = runBot({
      baseUrl,
      botName: 'example',
      stateFile,
      receiver: 'direct',
      receiverPort: 0,
      once: true,
      log: again.log,
    });
    await second.done;
    expect(again.out).toContainEqual(expect.stringMatching(/^reusing saved credentials for bot_/));
    expect(again.out.some((l) => l.startsWith('registered'))).toBe(false);
    expect(again.out.some((l) => l.startsWith('claim link'))).toBe(false);
    expect(again.out).toContainEqual(
      expect.stringMatching(/^status active, wallet active, balance \$25\.00/),
    );
  });

  it('waits for a long claim without piling up abort listeners (no MaxListenersExceededWarning)', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    const owner = await createOwner(svc);
    const output = lines();
    const bot = runBot({
      baseUrl,
      botName: 'patient',
      ownerEmail: owner.email,
      stateFile: join(dir, 'patient.json'),
      receiver: 'direct',
      receiverPort: 0,
      claimPollMs: 1,
      log: output.log,
    });
    try {
      await output.waitFor(/^waiting for the owner/);
      // Dozens of status polls, each with a sleep on the bot's one signal.
      await new Promise((r) => setTimeout(r, 600));
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
    } finally {
      process.off('warning', onWarning);
      await bot.stop();
    }
  });

  it('prints the tunnel client command when registered without a callback URL', async () => {
    const output = lines();
    const bot = runBot({
      baseUrl,
      botName: 'tunnelled',
      ownerEmail: 'tunnel-owner@example.com',
      stateFile: join(dir, 'tunnel.json'),
      receiver: 'tunnel',
      receiverPort: 0,
      tunnel: 'print',
      claimPollMs: 20,
      log: output.log,
    });
    try {
      const line = await output.waitFor(/^tunnel: /);
      // The command passes the token in BOTPAY_TUNNEL_TOKEN; the bot prints it masked.
      expect(line).toMatch(
        /BOTPAY_TUNNEL_TOKEN=svc_tun_… botpay tunnel --server \S+ --port \d+ --path \/webhook \(tunnel_token is in /,
      );
      const state = JSON.parse(await readFile(join(dir, 'tunnel.json'), 'utf8'));
      expect(state.tunnel_client_command).toContain(
        `BOTPAY_TUNNEL_TOKEN=${state.tunnel_token} botpay tunnel`,
      );
      expect(state.tunnel_token).toMatch(/^svc_tun_[0-9a-f]{48}$/);
      await output.waitFor(/^claim link: /);
      expect(output.out.join('\n')).not.toMatch(/svc_tun_[0-9a-f]/);
    } finally {
      await bot.stop();
    }
  });

  it('by default opens the tunnel in its own process (the SDK), and webhooks arrive through it', async () => {
    // A service of its own whose clock reads the real time: the bot's receiver checks the
    // signature's timestamp against the real clock, as a bot does.
    const live = await createTestService({ clock: new FakeClock(Date.now()) });
    const liveUrl = await live.app.listen({ port: 0, host: '127.0.0.1' });
    const output = lines();
    const owner = await createOwner(live);
    const bot = runBot({
      baseUrl: liveUrl,
      botName: 'in-process-tunnel',
      ownerEmail: owner.email,
      stateFile: join(dir, 'sdk.json'),
      receiver: 'tunnel',
      receiverPort: 0,
      claimPollMs: 20,
      log: output.log,
    });
    try {
      // What the README shows for the tunnel (a fence of its own, `text`) is what the bot prints.
      const readme = await readFile(join(process.cwd(), 'examples/bot/README.md'), 'utf8');
      const shown = readme.split('\n').find((l) => l.startsWith('tunnel: botpay tunnel: connected'));
      expect(shown).toBeDefined();
      await output.waitFor(samplePattern(shown ?? ''));
      const claimLine = await output.waitFor(/^claim link: /);
      const token = new URL(claimLine.slice('claim link: '.length)).searchParams.get('token');
      const botId = (JSON.parse(await readFile(join(dir, 'sdk.json'), 'utf8')) as { bot_id: string }).bot_id;
      await claimAndFund(live, owner, token, botId, 700);
      // The service's delivery worker posts to the bot's tunnel hostname; the relay hands the
      // request to the bot's process, whose SDK receiver verifies and logs it.
      const worker = new DeliveryWorker(live.ctx);
      await worker.runOnce();
      await worker.stop();
      await output.waitFor(/^webhook wallet\.funded evt_\S+ \{"funding_id":"fund_[^"]+","amount":7,/);
      expect(output.out.join('\n')).not.toMatch(/svc_tun_[0-9a-f]/);
      expect(output.out.some((l) => l.startsWith('tunnel: run the tunnel client'))).toBe(false);
    } finally {
      await bot.stop();
      await live.close();
    }
  });

  it('can run the tunnel client itself, masking the token in what it relays', async () => {
    const output = lines();
    const bot = runBot({
      baseUrl,
      botName: 'tunnel-spawner',
      ownerEmail: 'tunnel-owner@example.com',
      stateFile: join(dir, 'spawn.json'),
      receiver: 'tunnel',
      receiverPort: 0,
      tunnel: 'spawn',
      claimPollMs: 20,
      log: output.log,
    });
    try {
      await output.waitFor(/^tunnel: started the tunnel client \(pid \d+\)$/);
      await output.waitFor(/^claim link: /);
    } finally {
      await bot.stop();
    }
    await output.waitFor(/^tunnel: client exited/);
    expect(output.out.join('\n')).not.toMatch(/svc_tun_[0-9a-f]/);
  });

  // Runs once the checkout module is merged (skipped while the route does not exist).
  it('buys something, waits for the owner to approve, and never prints the card details', async (t) => {
    if (!svc.app.hasRoute({ method: 'POST', url: '/api/v1/bot/merchant/checkout' })) return t.skip();
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner, { fundCents: 5_000 });
    const call = async (url: string, payload: object) => {
      const res = await svc.app.inject({ method: 'POST', url, headers: owner.auth, payload });
      expect(res.statusCode, res.body).toBeLessThan(300);
      return res.json() as Record<string, unknown>;
    };
    const card = await call(`/api/v1/owner/bots/${bot.bot_id}/cards`, { label: 'example' });
    const start = { ...card, bot_id: bot.bot_id } as unknown as CardStart;
    const number = realCardNumber(start.missing_digit_positions[0]!, '482');
    await call(
      `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}/activate`,
      splitCard(start, { number, expiry: { expiry_month: '07', expiry_year: '2031' } }).activation,
    );
    // Credentials saved as the bot saves them after registering.
    const stateFile = join(dir, 'buyer.json');
    await writeFile(
      stateFile,
      JSON.stringify({
        base_url: baseUrl,
        bot_id: bot.bot_id,
        api_key: bot.api_key,
        webhook_secret: bot.webhook_secret,
        receiver: 'direct',
        receiver_port: 0,
      }),
      { mode: 0o600 },
    );
    const output = lines();
    const buyer = runBot({
      baseUrl,
      botName: 'buyer',
      stateFile,
      receiver: 'direct',
      receiverPort: 0,
      once: true,
      purchase: {
        profile_index: card.real_profile_index as number,
        merchant_name: 'Example Store',
        merchant_url: 'https://store.example.com',
        item_name: 'USB cable',
        amount_cents: 300,
        category: 'retail',
      },
      clientSleep: (ms) => new Promise((resolve) => setTimeout(resolve, Math.min(ms, 50))),
      log: output.log,
    });
    const pending = await output.waitFor(/^purchase pending owner approval: USB cable for \$3\.00/);
    const confirmationId = /(chk_[a-z2-7]+)/.exec(pending)![1]!;
    await call(`/api/v1/owner/approvals/${confirmationId}/approve`, {});
    await buyer.done;
    expect(output.out).toContainEqual(
      `purchase approved by the owner: ${confirmationId}; card details received`,
    );
    expect(output.out.join('\n')).not.toContain('482');
  });
});
