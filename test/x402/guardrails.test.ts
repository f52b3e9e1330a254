import { decodePaymentSignatureHeader } from '@x402/core/http';
import { getAddress, verifyTypedData } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/platform/crypto.ts';
import { processDueConfirmations } from '../../src/spend/holds.ts';
import { announceApproved } from '../../src/x402/service.ts';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import {
  type Bot,
  creditDeposit,
  enableWallet,
  OTHER_PAY_TO,
  PAY_TO,
  payRequest,
  requirement,
  snapshot,
  USDC,
  walletRow,
  X402_ENV,
  wrongChecksum,
} from './helpers.ts';

// The partner wallet's guardrail chain against a real database (both legs), without a chain: the
// ledger is credited the way the reconciliation job credits a deposit. Signing is real (viem).

const URL_A = 'https://api.example.com/weather';

describe('x402 rail without configuration', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService();
  });
  afterAll(async () => svc?.close());

  it('cannot be turned on (409 rail_not_configured) and pays nothing', async () => {
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const on = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active' },
    });
    expect(on.statusCode).toBe(409);
    expect(on.json()).toMatchObject({ error: 'rail_not_configured' });
    const paid = await payRequest(svc, bot, { resource_url: URL_A, payment_requirements: [requirement()] });
    expect(paid.statusCode).toBe(403);
    expect(paid.json()).toMatchObject({ error: 'rail_not_active' });
  });
});

describe('x402 partner wallet', () => {
  let svc: TestService;
  let owner: Awaited<ReturnType<typeof createOwner>>;

  beforeAll(async () => {
    svc = await createTestService({ env: { ...X402_ENV, CHECKOUT_RATE_LIMIT_PER_HOUR: '1000' } });
    owner = await createOwner(svc);
  });
  afterAll(async () => svc?.close());

  async function freshBot(
    settings: Record<string, unknown> = {},
    fundCents = 1000,
  ): Promise<Bot & { address: string }> {
    const bot = await activeBot(svc, owner);
    const { address } = await enableWallet(svc, owner, bot.bot_id, settings);
    if (fundCents > 0) await creditDeposit(svc, bot.bot_id, fundCents);
    return { ...bot, address };
  }

  it('turning the rail on creates a key pair: the address is shown, the key never', async () => {
    const bot = await activeBot(svc, owner);
    const on = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active' },
    });
    expect(on.statusCode, on.body).toBe(200);
    const address = on.json().address as string;
    expect(getAddress(address)).toBe(address);
    const row = (
      await svc.ctx.db.query<{ key_enc: string; key_source: string }>(
        'SELECT key_enc, key_source FROM x402_wallets WHERE bot_id = $1',
        [bot.bot_id],
      )
    )[0]!;
    expect(row.key_source).toBe('generated');
    const key = svc.ctx.secrets.decrypt(row.key_enc);
    expect(privateKeyToAccount(key as `0x${string}`).address).toBe(address);
    expect(row.key_enc).not.toContain(key.slice(2));

    const status = await svc.app.inject({ method: 'GET', url: '/api/v1/bot/status', headers: bot.auth });
    expect(status.json().rails.partner_wallet).toMatchObject({
      status: 'active',
      address,
      balance_usd: 0,
      balance_read_at: null,
    });
    const owned = await svc.app.inject({
      method: 'GET',
      url: `/api/v1/owner/bots/${bot.bot_id}/x402`,
      headers: owner.auth,
    });
    expect(owned.statusCode).toBe(200);
    for (const body of [on.body, status.body, owned.body, svc.logs()]) {
      expect(body).not.toContain(key.slice(2));
      expect(body).not.toContain(row.key_enc);
    }
    // An address typed by the owner is not a wallet any more.
    const typed = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active', address: PAY_TO },
    });
    expect(typed.statusCode).toBe(400);
  });

  it('imports a key the owner gives; a malformed key is 400 and never echoed', async () => {
    const bot = await activeBot(svc, owner);
    const bad = '0x1234nothex';
    const refused = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active', private_key: bad },
    });
    expect(refused.statusCode).toBe(400);
    expect(refused.body).not.toContain(bad);
    const zero = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active', private_key: `0x${'0'.repeat(64)}` },
    });
    expect(zero.statusCode).toBe(400);
    const key = generatePrivateKey();
    const on = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active', private_key: key },
    });
    expect(on.statusCode, on.body).toBe(200);
    expect(on.json().address).toBe(privateKeyToAccount(key).address);
    expect(on.body).not.toContain(key.slice(2));
    expect(svc.logs()).not.toContain(key.slice(2));
    // The same key for a second bot would mix two ledgers over one address.
    const other = await activeBot(svc, owner);
    const dup = await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${other.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active', private_key: key },
    });
    expect(dup.statusCode).toBe(409);
  });

  it('pays at once under the threshold: a signed EIP-3009 authorisation, ledger and event', async () => {
    const bot = await freshBot({ approval_threshold_cents: 100 });
    const res = await payRequest(svc, bot, {
      resource_url: URL_A,
      payment_requirements: [requirement({ amount: '50000' })],
    });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      approved: true,
      status: 'approved',
      amount_usd: 0.05,
      amount_atomic: '50000',
      pay_to: PAY_TO,
      payment_header_name: 'PAYMENT-SIGNATURE',
    });
    const payload = decodePaymentSignatureHeader(body.payment_header);
    expect(payload).toEqual(body.payment_payload);
    expect(payload.accepted).toEqual(requirement({ amount: '50000' }));
    const auth = (payload.payload as { authorization: Record<string, string>; signature: `0x${string}` })
      .authorization;
    expect(auth).toMatchObject({ from: bot.address, to: PAY_TO, value: '50000', validAfter: '0' });
    const validity = Number(auth.validBefore) - Math.floor(Date.now() / 1000);
    expect(validity).toBeGreaterThan(30);
    expect(validity).toBeLessThanOrEqual(60);
    const valid = await verifyTypedData({
      address: bot.address as `0x${string}`,
      domain: { name: 'USD Coin', version: '2', chainId: 31337, verifyingContract: USDC },
      types: {
        TransferWithAuthorization: [
          { name: 'from', type: 'address' },
          { name: 'to', type: 'address' },
          { name: 'value', type: 'uint256' },
          { name: 'validAfter', type: 'uint256' },
          { name: 'validBefore', type: 'uint256' },
          { name: 'nonce', type: 'bytes32' },
        ],
      },
      primaryType: 'TransferWithAuthorization',
      message: {
        from: auth.from as `0x${string}`,
        to: auth.to as `0x${string}`,
        value: BigInt(auth.value!),
        validAfter: 0n,
        validBefore: BigInt(auth.validBefore!),
        nonce: auth.nonce as `0x${string}`,
      },
      signature: (payload.payload as { signature: `0x${string}` }).signature,
    });
    expect(valid).toBe(true);
    expect(await walletRow(svc, bot.bot_id)).toMatchObject({
      available_micros: expect.anything(),
    });
    const w = await walletRow(svc, bot.bot_id);
    expect([Number(w.available_micros), Number(w.held_micros), Number(w.authorized_micros)]).toEqual(
      [995, 0, 5].map((c) => c * 10_000),
    );
    // purchase.approved waits until the seller is known to have taken the payment (the chain, here:
    // reconcile.ts; a refused one never announces it); the announcement carries no signed payload.
    const events = await svc.ctx.db.query<{ type: string; body: string }>(
      'SELECT type, body FROM events WHERE bot_id = $1 ORDER BY seq DESC',
      [bot.bot_id],
    );
    expect(events.map((e) => e.type)).not.toContain('purchase.approved');
    const row = (await svc.ctx.db.query('SELECT * FROM x402_payments WHERE id = $1', [body.payment_id]))[0]!;
    await svc.ctx.db.transaction((tx) => announceApproved(tx, row as never, svc.clock.now()));
    await svc.ctx.db.transaction((tx) => announceApproved(tx, row as never, svc.clock.now()));
    const announced = await svc.ctx.db.query<{ type: string; body: string }>(
      `SELECT type, body FROM events WHERE bot_id = $1 AND type = 'purchase.approved'`,
      [bot.bot_id],
    );
    expect(announced).toHaveLength(1);
    expect(JSON.parse(announced[0]!.body).data).toMatchObject({
      checkout_id: body.payment_id,
      amount: 0.05,
      vendor: 'api.example.com',
    });
    expect(announced[0]!.body).not.toContain(body.payment_header);
    // The poll returns the same signed payment while it is outstanding.
    const poll = await svc.app.inject({
      method: 'GET',
      url: `/api/v1/bot/x402/payments/${body.payment_id}`,
      headers: bot.auth,
    });
    expect(poll.json()).toMatchObject({
      status: 'approved',
      payment_status: 'authorized',
      payment_header: body.payment_header,
    });
    // The owner sees it.
    const list = await svc.app.inject({
      method: 'GET',
      url: `/api/v1/owner/bots/${bot.bot_id}/x402/payments`,
      headers: owner.auth,
    });
    expect(list.json().payments[0]).toMatchObject({
      payment_id: body.payment_id,
      status: 'authorized',
      tx_hash: null,
    });
    // The spend counts in the bot's and the owner's figures.
    const status = await svc.app.inject({ method: 'GET', url: '/api/v1/bot/status', headers: bot.auth });
    expect(status.json().rails.card_wallet ?? {}).toBeDefined();
  });

  it('Idempotency-Key replays the same signed payment; a different body is 409', async () => {
    const bot = await freshBot();
    const body = { resource_url: URL_A, payment_requirements: requirement() };
    const a = await payRequest(svc, bot, body, { 'idempotency-key': 'k1' });
    const b = await payRequest(svc, bot, body, { 'idempotency-key': 'k1' });
    expect(a.statusCode).toBe(200);
    expect(b.json()).toEqual(a.json());
    const c = await payRequest(
      svc,
      bot,
      { ...body, resource_url: 'https://api.example.com/other' },
      { 'idempotency-key': 'k1' },
    );
    expect(c.statusCode).toBe(409);
    const n = await svc.ctx.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM x402_payments WHERE bot_id = $1',
      [bot.bot_id],
    );
    expect(n[0]!.n).toBe(1);
  });

  it('Idempotency-Key is kept on the payment row: a held payment replays its 202, whatever was decided since', async () => {
    const bot = await freshBot({ approval_mode: 'ask_for_everything' });
    const body = { resource_url: URL_A, payment_requirements: requirement() };
    const a = await payRequest(svc, bot, body, { 'idempotency-key': 'held-1' });
    expect(a.statusCode, a.body).toBe(202);
    const row = await svc.ctx.db.query<{ idempotency_key: string; request_hash: string | null }>(
      'SELECT idempotency_key, request_hash FROM x402_payments WHERE id = $1',
      [a.json().payment_id],
    );
    expect(row).toEqual([{ idempotency_key: 'x402:held-1', request_hash: expect.any(String) }]);
    // No response is stored for it, and the confirmation carries no key (the payment row does).
    expect(
      await svc.ctx.db.query('SELECT 1 FROM checkout_idempotency WHERE bot_id = $1', [bot.bot_id]),
    ).toEqual([]);
    expect(
      await svc.ctx.db.query('SELECT idempotency_key FROM checkout_confirmations WHERE id = $1', [
        a.json().payment_id,
      ]),
    ).toEqual([{ idempotency_key: null }]);
    const approve = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/approvals/${a.json().payment_id}/approve`,
      headers: owner.auth,
    });
    expect(approve.statusCode, approve.body).toBe(200);
    const b = await payRequest(svc, bot, body, { 'idempotency-key': 'held-1' });
    expect(b.statusCode).toBe(202);
    expect(b.json()).toEqual(a.json());
  });

  it('Idempotency-Key: a replay is not counted; after 24 hours the key pays afresh', async () => {
    const bot = await freshBot();
    const body = { resource_url: URL_A, payment_requirements: requirement() };
    const a = await payRequest(svc, bot, body, { 'idempotency-key': 'day-1' });
    expect(a.statusCode, a.body).toBe(200);
    const hits = async () =>
      (
        await svc.ctx.db.query<{ n: number }>(
          'SELECT coalesce(cardinality(hits), 0)::int AS n FROM rate_limits WHERE key = $1',
          [`x402:${bot.bot_id}`],
        )
      )[0]?.n;
    const counted = await hits();
    expect((await payRequest(svc, bot, body, { 'idempotency-key': 'day-1' })).json()).toEqual(a.json());
    expect(await hits()).toBe(counted);
    svc.clock.advance(24 * 3600_000 + 1000);
    const c = await payRequest(svc, bot, body, { 'idempotency-key': 'day-1' });
    expect(c.statusCode, c.body).toBe(200);
    expect(c.json().payment_id).not.toBe(a.json().payment_id);
    const keys = await svc.ctx.db.query<{ id: string; idempotency_key: string | null }>(
      'SELECT id, idempotency_key FROM x402_payments WHERE bot_id = $1 ORDER BY created_at',
      [bot.bot_id],
    );
    expect(keys).toEqual([
      { id: a.json().payment_id, idempotency_key: null },
      { id: c.json().payment_id, idempotency_key: 'x402:day-1' },
    ]);
  });

  it('Idempotency-Key: a payment keyed before migration 0051 is answered from its stored response', async () => {
    const bot = await freshBot();
    const body = { resource_url: URL_A, payment_requirements: requirement() };
    const hash = sha256Hex(
      JSON.stringify(['x402', body.resource_url, body.payment_requirements, null, null]),
    );
    // The answer the previous version stored: a real payment's (made here without a key).
    const first = await payRequest(svc, bot, body);
    expect(first.statusCode, first.body).toBe(200);
    const stored = first.json();
    await svc.ctx.db.query(
      `INSERT INTO checkout_idempotency (bot_id, key, request_hash, created_at, status_code, response_enc)
       VALUES ($1, 'x402:old-1', $2, $3, 200, $4)`,
      [
        bot.bot_id,
        hash,
        new Date(svc.clock.now() - 3600_000),
        svc.ctx.secrets.encrypt(JSON.stringify(stored)),
      ],
    );
    const a = await payRequest(svc, bot, body, { 'idempotency-key': 'old-1' });
    expect(a.statusCode).toBe(200);
    expect(a.json()).toEqual(stored);
    const other = await payRequest(
      svc,
      bot,
      { ...body, resource_url: 'https://api.example.com/other' },
      { 'idempotency-key': 'old-1' },
    );
    expect(other.statusCode).toBe(409);
    // Nothing paid again.
    expect(
      await svc.ctx.db.query('SELECT 1 FROM x402_payments WHERE bot_id = $1', [bot.bot_id]),
    ).toHaveLength(1);
  });

  describe('bad input is 400 with a clear message and signs nothing', () => {
    const cases: Array<[string, unknown, RegExp]> = [
      ['payTo with a wrong checksum', requirement({ payTo: wrongChecksum(PAY_TO) }), /payTo.*checksum/],
      ['asset with a wrong checksum', requirement({ asset: wrongChecksum(USDC) }), /asset.*checksum/],
      ['not an address', requirement({ payTo: '0x1234' }), /payTo must be a 0x-prefixed/],
      ['wrong network', requirement({ network: 'eip155:8453' }), /network.*eip155:31337/],
      ['wrong asset', requirement({ asset: OTHER_PAY_TO }), /asset.*USDC/],
      ['fraction of a micro-USDC', requirement({ amount: '10000.5' }), /fraction of a micro-USDC/],
      ['fraction written small', requirement({ amount: '0.0000001' }), /fraction of a micro-USDC/],
      ['not a whole number of micros', requirement({ amount: '1.5' }), /fraction of a micro-USDC/],
      ['zero amount', requirement({ amount: '0' }), /greater than zero/],
      ['negative amount', requirement({ amount: '-10000' }), /only digits/],
      ['amount as a number', requirement({ amount: 10000 }), /amount/],
      [
        'x402 v1 requirement for another network',
        { ...requirement({ network: 'base' }), maxAmountRequired: '10000', amount: undefined },
        /"base" \(eip155:8453\), this service pays on eip155:31337/,
      ],
      ['unsupported scheme', requirement({ scheme: 'upto' }), /only "exact"/],
      [
        'permit2 transfer',
        requirement({ extra: { name: 'USD Coin', version: '2', assetTransferMethod: 'permit2' } }),
        /eip3009/,
      ],
      ['no EIP-712 domain', requirement({ extra: {} }), /extra.name/],
      ['missing payTo', { ...requirement(), payTo: undefined }, /payTo/],
      ['empty list', [], /payment_requirements/],
    ];
    for (const [name, reqs, message] of cases) {
      it(name, async () => {
        const bot = await freshBot();
        const before = await snapshot(svc, bot.bot_id);
        const res = await payRequest(svc, bot, { resource_url: URL_A, payment_requirements: reqs });
        expect(res.statusCode, res.body).toBe(400);
        expect(res.json().error).toBe('validation_error');
        expect(res.json().message).toMatch(message);
        expect(await snapshot(svc, bot.bot_id)).toBe(before);
      });
    }
    it('a resource_url that is not http(s)', async () => {
      const bot = await freshBot();
      const res = await payRequest(svc, bot, {
        resource_url: 'ftp://x.example/a',
        payment_requirements: [requirement()],
      });
      expect(res.statusCode).toBe(400);
      expect(res.json().message).toMatch(/resource_url/);
    });
  });

  describe('each limit and list refuses with a spec-style 403 and changes nothing', () => {
    const cases: Array<
      [string, Record<string, unknown>, Record<string, unknown>, string, Record<string, unknown>]
    > = [
      [
        'rail per-transaction',
        { per_transaction_cents: 4 },
        {},
        'rail_guardrail_violation',
        { limit: 'per_transaction' },
      ],
      [
        'rail daily',
        { daily_cents: 6, per_transaction_cents: 5 },
        { amount: '40000' },
        'rail_guardrail_violation',
        { limit: 'daily' },
      ],
      ['rail monthly', { monthly_cents: 4 }, {}, 'rail_guardrail_violation', { limit: 'monthly' }],
      ['pay-to deny list', { deny_pay_to: [PAY_TO] }, {}, 'destination_not_allowed', {}],
      ['pay-to allow list', { allow_pay_to: [OTHER_PAY_TO] }, {}, 'destination_not_allowed', {}],
      ['domain deny list', { deny_domains: ['*.example.com'] }, {}, 'destination_not_allowed', {}],
      ['domain allow list', { allow_domains: ['data.example.org'] }, {}, 'destination_not_allowed', {}],
    ];
    for (const [name, settings, req, code, details] of cases) {
      it(name, async () => {
        const bot = await freshBot(settings);
        // The daily case: a first payment fills the day.
        if (name === 'rail daily') {
          const first = await payRequest(svc, bot, {
            resource_url: URL_A,
            payment_requirements: [requirement(req)],
          });
          expect(first.statusCode, first.body).toBe(200);
        }
        const before = await snapshot(svc, bot.bot_id);
        const res = await payRequest(svc, bot, {
          resource_url: URL_A,
          payment_requirements: [requirement({ amount: '50000' })],
        });
        expect(res.statusCode, res.body).toBe(403);
        expect(res.json()).toMatchObject({ error: code, message: expect.any(String), ...details });
        expect(await snapshot(svc, bot.bot_id)).toBe(before);
      });
    }

    it('master guardrails: per-transaction and daily budgets across rails', async () => {
      const own = await createOwner(svc);
      const g = await svc.app.inject({
        method: 'PUT',
        url: '/api/v1/owner/guardrails',
        headers: own.auth,
        payload: { per_transaction_cents: 30, daily_budget_cents: 50, monthly_budget_cents: 1000 },
      });
      expect(g.statusCode, g.body).toBe(200);
      const bot = await activeBot(svc, own);
      await enableWallet(svc, own, bot.bot_id, {
        per_transaction_cents: 100,
        approval_threshold_cents: 1000,
      });
      await creditDeposit(svc, bot.bot_id, 1000);
      const tooBig = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: '400000' })],
      });
      expect(tooBig.statusCode).toBe(403);
      expect(tooBig.json()).toMatchObject({ error: 'master_budget_exceeded', limit: 'per_transaction' });
      const ok = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: '300000' })],
      });
      expect(ok.statusCode, ok.body).toBe(200);
      const before = await snapshot(svc, bot.bot_id);
      const over = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: '300000' })],
      });
      expect(over.statusCode).toBe(403);
      expect(over.json()).toMatchObject({
        error: 'master_budget_exceeded',
        limit: 'daily',
        remaining_usd: 0.2,
      });
      expect(await snapshot(svc, bot.bot_id)).toBe(before);
    });

    it('insufficient funds is 402; a frozen wallet and an inactive rail are 403', async () => {
      const bot = await freshBot({}, 3);
      const before = await snapshot(svc, bot.bot_id);
      const poor = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: '40000' })],
      });
      expect(poor.statusCode).toBe(402);
      expect(poor.json()).toMatchObject({ error: 'insufficient_funds', balance_usd: 0.03 });
      expect(await snapshot(svc, bot.bot_id)).toBe(before);
      await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
        headers: owner.auth,
      });
      const frozen = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement()],
      });
      expect(frozen.json()).toMatchObject({ error: 'wallet_frozen' });
      await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/bots/${bot.bot_id}/wallet/unfreeze`,
        headers: owner.auth,
      });
      const off = await svc.app.inject({
        method: 'PUT',
        url: `/api/v1/owner/bots/${bot.bot_id}/rails/partner_wallet`,
        headers: owner.auth,
        payload: { status: 'inactive' },
      });
      expect(off.statusCode).toBe(200);
      const inactive = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement()],
      });
      expect(inactive.statusCode).toBe(403);
      expect(inactive.json()).toMatchObject({ error: 'rail_not_active' });
    });
  });

  describe('approval mode: holds, approve, deny, expiry (the checkout machinery)', () => {
    it('held → 202; the owner approves → the poll returns a freshly signed payment', async () => {
      const bot = await freshBot({ approval_mode: 'ask_for_everything' });
      const res = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: '30000' })],
      });
      expect(res.statusCode, res.body).toBe(202);
      const held = res.json();
      expect(held).toMatchObject({ approved: false, status: 'pending_confirmation', amount_usd: 0.03 });
      expect(Date.parse(held.expires_at)).toBe(svc.clock.now() + 900_000);
      expect(await walletRow(svc, bot.bot_id)).toMatchObject({ held_micros: expect.anything() });
      expect(Number((await walletRow(svc, bot.bot_id)).held_micros)).toBe(3 * 10_000);
      const poll = await svc.app.inject({
        method: 'GET',
        url: `/api/v1/bot/x402/payments/${held.payment_id}`,
        headers: bot.auth,
      });
      expect(poll.json()).toMatchObject({ status: 'pending', expires_at: held.expires_at });
      expect(poll.json().payment_header).toBeUndefined();
      // The checkout poll does not answer for x402 payments.
      const wrong = await svc.app.inject({
        method: 'GET',
        url: `/api/v1/bot/merchant/checkout/status?confirmation_id=${held.payment_id}`,
        headers: bot.auth,
      });
      expect(wrong.statusCode).toBe(404);
      const inbox = await svc.app.inject({
        method: 'GET',
        url: '/api/v1/owner/approvals',
        headers: owner.auth,
      });
      expect(inbox.json().approvals.map((a: { confirmation_id: string }) => a.confirmation_id)).toContain(
        held.payment_id,
      );
      // An x402 payment has no card: null, not an empty id (issue 33, item 8).
      expect(
        inbox
          .json()
          .approvals.find((a: { confirmation_id: string }) => a.confirmation_id === held.payment_id),
      ).toMatchObject({ rail: 'partner_wallet', card_id: null });
      // The owner is mailed as for a held card purchase.
      await new Promise((r) => setTimeout(r, 50));
      expect(svc.mailer.sent.some((m) => m.text.includes('api.example.com'))).toBe(true);

      svc.clock.advance(60_000);
      const approve = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/approvals/${held.payment_id}/approve`,
        headers: owner.auth,
      });
      expect(approve.statusCode, approve.body).toBe(200);
      const after = await svc.app.inject({
        method: 'GET',
        url: `/api/v1/bot/x402/payments/${held.payment_id}`,
        headers: bot.auth,
      });
      expect(after.json()).toMatchObject({ status: 'approved', payment_status: 'authorized' });
      const payload = decodePaymentSignatureHeader(after.json().payment_header);
      expect((payload.payload as { authorization: { value: string } }).authorization.value).toBe('30000');
      const w = await walletRow(svc, bot.bot_id);
      expect([Number(w.available_micros), Number(w.held_micros), Number(w.authorized_micros)]).toEqual(
        [997, 0, 3].map((c) => c * 10_000),
      );
      const types = await svc.ctx.db.query<{ type: string }>(
        'SELECT type FROM events WHERE bot_id = $1 ORDER BY created_at',
        [bot.bot_id],
      );
      expect(types.map((t) => t.type)).toContain('purchase.approved');
      const twice = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/approvals/${held.payment_id}/deny`,
        headers: owner.auth,
      });
      expect(twice.statusCode).toBe(409);
    });

    it('deny gives the hold and the counters back', async () => {
      const bot = await freshBot({
        approval_mode: 'ask_for_everything',
        daily_cents: 3,
        per_transaction_cents: 3,
      });
      const res = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: '30000' })],
      });
      expect(res.statusCode).toBe(202);
      const deny = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/approvals/${res.json().payment_id}/deny`,
        headers: owner.auth,
      });
      expect(deny.statusCode).toBe(200);
      const poll = await svc.app.inject({
        method: 'GET',
        url: `/api/v1/bot/x402/payments/${res.json().payment_id}`,
        headers: bot.auth,
      });
      expect(poll.json()).toMatchObject({ status: 'denied', payment_status: 'denied' });
      const w = await walletRow(svc, bot.bot_id);
      expect([Number(w.available_micros), Number(w.held_micros)]).toEqual([1000, 0].map((c) => c * 10_000));
      // The daily limit is free again.
      const again = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: '30000' })],
      });
      expect(again.statusCode).toBe(202);
      const types = await svc.ctx.db.query<{ type: string }>('SELECT type FROM events WHERE bot_id = $1', [
        bot.bot_id,
      ]);
      expect(types.map((t) => t.type)).toContain('purchase.denied');
    });

    it('expiry: the window elapses, the job expires it, the money comes back', async () => {
      const bot = await freshBot({ approval_mode: 'ask_for_everything' });
      const res = await payRequest(svc, bot, {
        resource_url: URL_A,
        payment_requirements: [requirement({ amount: '30000' })],
      });
      expect(res.statusCode).toBe(202);
      svc.clock.advance(900_001);
      await processDueConfirmations(svc.ctx);
      const poll = await svc.app.inject({
        method: 'GET',
        url: `/api/v1/bot/x402/payments/${res.json().payment_id}`,
        headers: bot.auth,
      });
      expect(poll.json()).toMatchObject({ status: 'expired', payment_status: 'expired' });
      const w = await walletRow(svc, bot.bot_id);
      expect([Number(w.available_micros), Number(w.held_micros), Number(w.authorized_micros)]).toEqual(
        [1000, 0, 0].map((c) => c * 10_000),
      );
      const late = await svc.app.inject({
        method: 'POST',
        url: `/api/v1/owner/approvals/${res.json().payment_id}/approve`,
        headers: owner.auth,
      });
      expect(late.statusCode).toBe(409);
      const types = await svc.ctx.db.query<{ type: string }>('SELECT type FROM events WHERE bot_id = $1', [
        bot.bot_id,
      ]);
      expect(types.map((t) => t.type)).toContain('purchase.expired');
    });

    it("another bot's payment is 404 to the poll", async () => {
      const a = await freshBot();
      const b = await freshBot();
      const res = await payRequest(svc, a, { resource_url: URL_A, payment_requirements: [requirement()] });
      const poll = await svc.app.inject({
        method: 'GET',
        url: `/api/v1/bot/x402/payments/${res.json().payment_id}`,
        headers: b.auth,
      });
      expect(poll.statusCode).toBe(404);
    });
  });
});
