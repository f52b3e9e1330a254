import { generatePrivateKey } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { activeBot, createOwner, createTestService, type TestService } from '../support/service.ts';
import { creditDeposit, payRequest, requirement, X402_ENV } from './helpers.ts';

// The partner wallet's private keys and the signed authorisations (bearer instruments for the
// amount they name) never reach the log, at the most verbose level.

describe('x402 secrets never reach the log', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await createTestService({ env: { ...X402_ENV, LOG_LEVEL: 'trace' } });
  });
  afterAll(async () => svc?.close());

  it('generated and imported keys, their ciphertext, signatures and payment headers', async () => {
    const owner = await createOwner(svc);
    const generated = await activeBot(svc, owner);
    await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${generated.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active' },
    });
    const imported = await activeBot(svc, owner);
    const importedKey = generatePrivateKey();
    await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${imported.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active', private_key: importedKey },
    });
    // A refused import (the same key again, for the other bot) must not log it either.
    await svc.app.inject({
      method: 'PUT',
      url: `/api/v1/owner/bots/${generated.bot_id}/rails/partner_wallet`,
      headers: owner.auth,
      payload: { status: 'active', private_key: importedKey },
    });
    await creditDeposit(svc, generated.bot_id, 100);
    const paid = await payRequest(svc, generated, {
      resource_url: 'https://api.example.com/x',
      payment_requirements: [requirement()],
    });
    expect(paid.statusCode).toBe(200);
    const rows = await svc.ctx.db.query<{ key_enc: string }>(
      'SELECT key_enc FROM x402_wallets WHERE bot_id IN ($1, $2)',
      [generated.bot_id, imported.bot_id],
    );
    const generatedKey = svc.ctx.secrets.decrypt(rows[0]!.key_enc);
    // Code that logs such objects on purpose is redacted too.
    svc.ctx.logger.info(
      { private_key: importedKey, signature: paid.json().payment_payload.payload.signature },
      'oops',
    );
    svc.ctx.logger.info(
      { body: { private_key: importedKey, payment_header: paid.json().payment_header } },
      'oops',
    );

    const logs = svc.logs();
    expect(logs).toContain('/api/v1/bot/x402/pay');
    const secrets = [
      importedKey.slice(2),
      generatedKey.slice(2),
      ...rows.map((r) => r.key_enc),
      paid.json().payment_header,
      paid.json().payment_payload.payload.signature.slice(2),
    ];
    for (const secret of secrets) expect(logs, `${secret.slice(0, 10)}… leaked`).not.toContain(secret);
  });
});
