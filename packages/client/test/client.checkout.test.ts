import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../../../test/support/service.ts';
import { BotPayClient } from '../src/client.ts';
import type { BotPayError } from '../src/errors.ts';
import type { CardStart } from '../../../src/cards/split.ts';
import { realCardNumber, splitCard } from '../../../test/support/cards.ts';

// The SDK's checkout, tasks and messages calls against the real service. These endpoints are built
// on other branches (checkout, tasks, webhooks); each test runs as soon as its route exists in the
// app and is skipped until then. The owner-side setup is the owner API of docs/api.md.

function has(svc: TestService, method: 'GET' | 'POST', url: string): boolean {
  return svc.app.hasRoute({ method, url });
}

async function ownerCall(
  svc: TestService,
  owner: TestOwner,
  method: 'POST' | 'PATCH',
  url: string,
  payload: object,
) {
  const res = await svc.app.inject({ method, url, headers: owner.auth, payload });
  if (res.statusCode >= 300) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`);
  return res.json() as Record<string, unknown>;
}

/** A claimed, funded bot with an activated card; returns the real profile index. */
async function botWithCard(svc: TestService, baseUrl: string, fundCents: number) {
  const owner = await createOwner(svc);
  const bot = await activeBot(svc, owner, { fundCents });
  const card = await ownerCall(svc, owner, 'POST', `/api/v1/owner/bots/${bot.bot_id}/cards`, {
    label: 'sdk',
  });
  const start = { ...card, bot_id: bot.bot_id } as unknown as CardStart;
  await ownerCall(
    svc,
    owner,
    'POST',
    `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}/activate`,
    splitCard(start, {
      number: realCardNumber(start.missing_digit_positions[0]!, '123'),
      expiry: { expiry_month: '04', expiry_year: '2031' },
    }).activation,
  );
  const client = new BotPayClient({ baseUrl, apiKey: bot.api_key });
  return { owner, bot, client, profileIndex: card.real_profile_index as number };
}

const purchase = (profileIndex: number, amountCents: number) => ({
  profile_index: profileIndex,
  merchant_name: 'Example Store',
  merchant_url: 'https://store.example.com',
  item_name: 'USB cable',
  amount_cents: amountCents,
  category: 'retail',
});

describe('checkout, tasks and messages through the client', () => {
  let svc: TestService;
  let baseUrl: string;
  beforeAll(async () => {
    svc = await createTestService({ env: { REGISTRATION_RATE_LIMIT_PER_HOUR: '1000' } });
    baseUrl = await svc.app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await svc?.close();
  });

  it('holds a purchase for approval and waitForDecision returns the card details once approved', async (t) => {
    if (!has(svc, 'POST', '/api/v1/bot/merchant/checkout')) return t.skip();
    const { owner, client, profileIndex } = await botWithCard(svc, baseUrl, 5_000);
    const result = await client.checkout(purchase(profileIndex, 300));
    expect(result).toMatchObject({ approved: false, status: 'pending_confirmation', amount_usd: 3 });
    if (result.approved) throw new Error('expected a pending confirmation');
    expect(result.confirmation_id).toMatch(/^chk_/);

    let polls = 0;
    const decided = await client.waitForDecision(result.confirmation_id, {
      sleep: async () => {
        polls++;
        if (polls === 2) {
          await ownerCall(
            svc,
            owner,
            'POST',
            `/api/v1/owner/approvals/${result.confirmation_id}/approve`,
            {},
          );
        }
      },
    });
    expect(decided).toMatchObject({ status: 'approved', missing_digits: '123', expiry_month: '04' });
    expect(polls).toBe(2);
  });

  it('replays the same answer for a retried Idempotency-Key and moves money once', async (t) => {
    if (!has(svc, 'POST', '/api/v1/bot/merchant/checkout')) return t.skip();
    const { client, profileIndex } = await botWithCard(svc, baseUrl, 5_000);
    const first = await client.checkout(purchase(profileIndex, 250), { idempotencyKey: 'sdk-order-1' });
    const again = await client.checkout(purchase(profileIndex, 250), { idempotencyKey: 'sdk-order-1' });
    expect(again.confirmation_id).toBe(first.confirmation_id);
    const conflict = (await client
      .checkout(purchase(profileIndex, 999), { idempotencyKey: 'sdk-order-1' })
      .catch((e) => e)) as BotPayError;
    expect(conflict).toMatchObject({ status: 409, code: 'idempotency_conflict' });
  });

  it('reports a refusal as a typed error with its code', async (t) => {
    if (!has(svc, 'POST', '/api/v1/bot/merchant/checkout')) return t.skip();
    const { client, profileIndex } = await botWithCard(svc, baseUrl, 100);
    const error = (await client.checkout(purchase(profileIndex, 400)).catch((e) => e)) as BotPayError;
    expect(error.status).toBeGreaterThanOrEqual(400);
    expect(error.status).toBeLessThan(500);
    expect(['insufficient_funds', 'card_guardrail_violation', 'master_budget_exceeded']).toContain(
      error.code,
    );
  });

  it('asks for the next task', async (t) => {
    if (!has(svc, 'POST', '/api/v1/bot/tasks/next')) return t.skip();
    const owner = await createOwner(svc);
    const bot = await activeBot(svc, owner);
    const client = new BotPayClient({ baseUrl, apiKey: bot.api_key });
    const next = await client.nextTask();
    expect(next.has_task).toBe(false);
    expect(typeof next.message).toBe('string');
  });

  it('lists undelivered events and acknowledges them', async (t) => {
    if (!has(svc, 'GET', '/api/v1/bot/messages')) return t.skip();
    const owner = await createOwner(svc);
    // The callback points at a closed port, so events stay queued.
    const bot = await activeBot(svc, owner, { fundCents: 700 });
    const client = new BotPayClient({ baseUrl, apiKey: bot.api_key });
    const listed = await client.messages();
    const funded = listed.messages.find((m) => m.event === 'wallet.funded');
    expect(funded).toMatchObject({ bot_id: bot.bot_id });
    await client.ackMessages([funded!.id]);
    const after = await client.messages();
    expect(after.messages.map((m) => m.id)).not.toContain(funded!.id);
  });
});
