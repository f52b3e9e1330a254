import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signPayload, signStandard } from '../../client/src/webhooks/verify.ts';
import { FakeClock } from '../../../src/platform/clock.ts';
import { DeliveryWorker } from '../../../src/webhooks/worker.ts';
import { DIGITS, setupCard } from '../../../test/checkout/helpers.ts';
import { isPostgres } from '../../../test/support/db.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestService,
} from '../../../test/support/service.ts';
import { creditDeposit, enableWallet, requirement, X402_ENV } from '../../../test/x402/helpers.ts';

// The Python client's own tests (packages/python/tests, unittest, standard library only) run by
// Debian's python3 against a real service listening on 127.0.0.1, with the webhook worker
// delivering for real. This side prepares what a bot cannot do for itself and hands it over in
// the environment: the owner's API token (the tests claim, fund and approve through the owner
// API), a bot with an active card, a bot whose partner wallet is on and credited (a deposit
// credited as the reconciliation job credits one: there is no chain here), and webhook
// signatures made by the TypeScript SDK for the cross-implementation checks. The client does not
// depend on the database: the embedded leg runs it once.

const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const run = promisify(execFile);

describe.skipIf(isPostgres)('the Python client (packages/python) against a real service', () => {
  let svc: TestService;
  let worker: DeliveryWorker;
  let work: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    svc = await createTestService({
      clock: new FakeClock(Date.now()),
      env: { ...X402_ENV, CHECKOUT_RATE_LIMIT_PER_HOUR: '1000', REGISTRATION_RATE_LIMIT_PER_HOUR: '1000' },
    });
    const baseUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
    worker = new DeliveryWorker(svc.ctx, { pollMs: 100 });
    await worker.start();
    const owner = await createOwner(svc);
    const shopper = await activeBot(svc, owner, { fundCents: 1000 });
    const card = await setupCard(svc, owner, shopper.bot_id);
    const payer = await activeBot(svc, owner);
    await enableWallet(svc, owner, payer.bot_id);
    await creditDeposit(svc, payer.bot_id, 500);

    const secret = `whsec_${'6b'.repeat(24)}`;
    const body = JSON.stringify({
      id: 'evt_ts',
      event: 'wallet.funded',
      timestamp: '',
      bot_id: 'bot_ts',
      data: {},
    });
    const at = Math.floor(Date.now() / 1000);
    work = await mkdtemp(join(tmpdir(), 'botpay-python-'));
    const fixtures = join(work, 'signed-by-typescript.json');
    await writeFile(
      fixtures,
      JSON.stringify({
        secret,
        body,
        timestamp: at,
        x_service_signature: signPayload(body, secret),
        webhook_signature: signStandard(body, secret, 'evt_ts', at),
        other_secret: 'whsec_other',
        other_webhook_signature: signStandard(body, 'whsec_other', 'evt_ts', at),
      }),
    );
    env = {
      PATH: process.env.PATH ?? '',
      PYTHONPATH: join(PACKAGE, 'src'),
      PYTHONDONTWRITEBYTECODE: '1',
      BOTPAY_URL: baseUrl,
      BOTPAY_OWNER_TOKEN: owner.token,
      BOTPAY_CARD_BOT_KEY: shopper.api_key,
      BOTPAY_CARD_PROFILE: String(card.real_profile_index),
      BOTPAY_CARD_DIGITS: DIGITS,
      BOTPAY_X402_BOT_KEY: payer.api_key,
      BOTPAY_X402_REQUIREMENT: JSON.stringify(requirement()),
      BOTPAY_FIXTURES: fixtures,
    };
  }, 120_000);

  afterAll(async () => {
    await worker?.stop();
    await svc?.close();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('passes its unittest suite, none skipped', async () => {
    const { stderr } = await run(PYTHON, ['-m', 'unittest', 'discover', '-s', 'tests', '-t', '.', '-v'], {
      cwd: PACKAGE,
      env,
      timeout: 240_000,
    }).catch((error: { stdout?: string; stderr?: string }) => {
      throw new Error(`python3 -m unittest failed:\n${error.stderr ?? ''}${error.stdout ?? ''}`);
    });
    // unittest reports on stderr: "Ran N tests" then "OK" (with "skipped=" when any was).
    const ran = Number(/^Ran (\d+) tests?/m.exec(stderr)?.[1] ?? 0);
    expect(ran, stderr).toBeGreaterThanOrEqual(15);
    expect(stderr).toMatch(/^OK$/m);
    expect(stderr).not.toMatch(/skipped/);
  }, 300_000);
});
