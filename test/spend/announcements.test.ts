import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SpendParams, spendAlone, spendCall } from '../../src/spend/run.ts';
import type { TestCard } from '../checkout/helpers.ts';
import { connectionFor, isPostgres } from '../support/db.ts';
import { createTestService, type TestService } from '../support/service.ts';
import { until } from '../support/wait.ts';
import { creditDeposit, enableWallet, PAY_TO, X402_ENV } from '../x402/helpers.ts';
import { botWithHoldingCard, spendParams } from './helpers.ts';

// A purchase announces its bot once (migration 0056). It used to do so three times in one
// statement: the wallet row's trigger, the bot counter's trigger and spend_run itself, each a
// trigger call and a NOTICE. The announcements are counted here as the NOTICEs botpay_notify
// raises in a session with botpay.defer_notify on (the driver's mechanism, PostgreSQL only: on
// PGlite the same calls are pg_notify, which PostgreSQL merges within a transaction, so there is
// nothing to count). Every other writer of the wallet row and of the bot counter still announces
// through the triggers.

describe.runIf(isPostgres)('a purchase announces its bot once (PostgreSQL)', () => {
  let svc: TestService;
  let botId: string;
  let card: TestCard;
  let client: pg.Client;
  const notices: string[] = [];

  beforeAll(async () => {
    svc = await createTestService({ env: { ...X402_ENV, CHECKOUT_RATE_LIMIT_PER_HOUR: '100000' } });
    const { owner, ...made } = await botWithHoldingCard(svc);
    botId = made.botId;
    card = made.card;
    await enableWallet(svc, owner, botId, {
      approval_mode: 'auto_approve_under_threshold',
      approval_threshold_cents: 10,
    });
    await creditDeposit(svc, botId, 10_000);
    const schema = svc.database.schema;
    if (!schema) throw new Error('no schema');
    client = new pg.Client({ connectionString: connectionFor(schema) });
    await client.connect();
    client.on('notice', (n) => notices.push(n.message ?? ''));
    await client.query("SET botpay.defer_notify = 'on'");
  });
  afterAll(async () => {
    await client?.end();
    await svc?.close();
  });

  const params = (method: SpendParams['method'], amountMicros: number) =>
    spendParams(svc, botId, method, amountMicros, `announcements:${botId}`);

  const cardMethod = (profileIndex: number): SpendParams['method'] => ({
    kind: 'card',
    cardId: card.card_id,
    profileIndex,
  });

  async function x402Method(amountMicros: number): Promise<SpendParams['method']> {
    const [w] = (
      await client.query<{ network: string; asset: string }>(
        'SELECT network, asset FROM x402_wallets WHERE bot_id = $1',
        [botId],
      )
    ).rows;
    if (!w) throw new Error('no partner wallet');
    return {
      kind: 'partner_wallet',
      payment: {
        network: w.network,
        asset: w.asset,
        pay_to: PAY_TO,
        resource_url: 'https://api.example/data',
        resource_domain: 'api.example',
        description: 'data',
        amount_micro: String(amountMicros),
        requirements: {},
        x402_version: 2,
        domain_check: 'probed',
      },
      domainRefused: false,
    };
  }

  /** The announcements heard since `notices` was emptied, as channel|payload, this bot's id as <bot>. */
  const announced = () =>
    notices
      .filter((n) => n.startsWith('botpay-notify '))
      .map((n) => n.slice('botpay-notify '.length).replaceAll(botId, '<bot>'))
      .sort();

  /** The announcements of one statement. */
  async function noticesOf(sql: string, values: unknown[] = []): Promise<string[]> {
    notices.length = 0;
    await client.query(sql, values);
    return announced();
  }

  async function spend(p: SpendParams): Promise<{ notices: string[]; held: boolean }> {
    notices.length = 0;
    const r = await client.query<{ r: { ok?: boolean; held?: boolean } }>(
      `SELECT ${spendCall.sql} AS r`,
      spendCall.params({ ...p, lowBalanceMicros: null, announce: true }),
    );
    expect(r.rows[0]?.r.ok, JSON.stringify(r.rows[0]?.r)).toBe(true);
    return { notices: announced(), held: r.rows[0]?.r.held === true };
  }

  it('a card purchase, approved or held, on the real profile or a decoy: one bot announcement', async () => {
    const seen: string[][] = [];
    for (const profile of [card.real_profile_index, card.decoyIndex]) {
      const approved = await spend(params(cardMethod(profile), 1_000_000));
      expect(approved.held).toBe(false);
      expect(approved.notices).toEqual(['botpay_bot_state|bot:<bot>', 'botpay_events|<bot>']);
      const held = await spend(params(cardMethod(profile), 20_000_000));
      expect(held.held).toBe(true);
      expect(held.notices).toEqual(['botpay_bot_state|bot:<bot>']);
      seen.push([...approved.notices, '/', ...held.notices]);
    }
    // The same on both profiles (docs/security.md: notifications name no profile).
    expect(seen[1]).toEqual(seen[0]);
  });

  it('an x402 payment, authorised or held: one bot announcement', async () => {
    // Under $0.10 authorised at once, at or above held (the rail's own limit is $1 a payment).
    const authorised = await spend(params(await x402Method(50_000), 50_000));
    expect(authorised.held).toBe(false);
    expect(authorised.notices).toEqual(['botpay_bot_state|bot:<bot>']);
    const held = await spend(params(await x402Method(200_000), 200_000));
    expect(held.held).toBe(true);
    expect(held.notices).toEqual(['botpay_bot_state|bot:<bot>']);
  });

  it('a call that leaves its announcements to its caller sends no NOTICE; spendAlone makes the same ones after the commit', async () => {
    // Room in the profile's weekly allowance for the purchases below (the tests above spent in it).
    await client.query('UPDATE card_profiles SET allowance_micros = 1000000000 WHERE card_id = $1', [
      card.card_id,
    ]);
    // The call alone (p_announce false): nothing announced, approved or held.
    for (const [amount, held] of [
      [1_000_000, false],
      [20_000_000, true],
    ] as const) {
      notices.length = 0;
      const r = await client.query<{ r: { ok?: boolean; held?: boolean } }>(
        `SELECT ${spendCall.sql} AS r`,
        spendCall.params({
          ...params(cardMethod(card.real_profile_index), amount),
          lowBalanceMicros: null,
          announce: false,
        }),
      );
      expect(r.rows[0]?.r).toMatchObject({ ok: true, held });
      expect(notices).toEqual([]);
    }
    // spendAlone: this instance's listeners hear the keys before it returns, another instance's
    // through NOTIFY (a LISTEN of its own here).
    const other = new pg.Client({ connectionString: connectionFor(svc.database.schema ?? '') });
    await other.connect();
    const remote: string[] = [];
    other.on('notification', (m) => remote.push(`${m.channel}|${m.payload}`));
    await other.query('LISTEN botpay_bot_state');
    await other.query('LISTEN botpay_events');
    const local: string[] = [];
    const stops = await Promise.all(
      ['botpay_bot_state', 'botpay_events'].map((channel) =>
        svc.ctx.db.listen(channel, (payload) => local.push(`${channel}|${payload}`)),
      ),
    );
    try {
      const heard = (list: string[]) =>
        [
          ...new Set(
            list.flatMap((n) =>
              n
                .split('|')[1]!
                .split(',')
                .map((k) => `${n.split('|')[0]}|${k}`),
            ),
          ),
        ]
          .filter((n) => n.includes(botId))
          .map((n) => n.replaceAll(botId, '<bot>'))
          .sort();
      for (const [amount, expected] of [
        [1_000_000, ['botpay_bot_state|bot:<bot>', 'botpay_events|<bot>']],
        [20_000_000, ['botpay_bot_state|bot:<bot>']],
      ] as const) {
        local.length = 0;
        remote.length = 0;
        notices.length = 0;
        const a = await spendAlone(svc.ctx.db, params(cardMethod(card.real_profile_index), amount), 0);
        expect(a?.refused, JSON.stringify(a?.r)).toBe(false);
        expect(heard(local)).toEqual(expected);
        await until(() => heard(remote).length === expected.length);
        expect(heard(remote)).toEqual(expected);
      }
      // A refusal announces nothing (nothing was written).
      local.length = 0;
      const refused = await spendAlone(svc.ctx.db, params(cardMethod(99), 1_000_000), 0);
      expect(refused?.r).toMatchObject({ error: 'invalid_profile' });
      expect(heard(local)).toEqual([]);
    } finally {
      for (const stop of stops) await stop();
      await other.end();
    }
  });

  it("other writers of the wallet row and of the bot's counter still announce through the triggers", async () => {
    expect(await noticesOf('UPDATE wallets SET updated_at = now() WHERE bot_id = $1', [botId])).toEqual([
      'botpay_bot_state|bot:<bot>',
    ]);
    expect(
      await noticesOf('UPDATE spend_windows SET month_micros = month_micros WHERE scope = $1', [
        `bot:${botId}`,
      ]),
    ).toEqual(['botpay_bot_state|bot:<bot>']);
    // The setting spend_run uses does not outlive its call: the same writes after a purchase, in
    // the purchase's transaction, are announced too.
    await client.query('BEGIN');
    try {
      await spend(params(cardMethod(card.real_profile_index), 1_000_000));
      expect(await noticesOf('UPDATE wallets SET updated_at = now() WHERE bot_id = $1', [botId])).toEqual([
        'botpay_bot_state|bot:<bot>',
      ]);
    } finally {
      await client.query('ROLLBACK');
    }
  });
});
