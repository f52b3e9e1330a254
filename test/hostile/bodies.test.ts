import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeTable } from '../../src/app.ts';
import { AUDIT_DETAILS_MAX } from '../../src/owners/audit.ts';
import { MAX_JSON_DEPTH } from '../../src/platform/bodies.ts';
import { splitCard } from '../support/cards.ts';
import {
  activeBot,
  createOwner,
  createTestService,
  type TestOwner,
  type TestService,
} from '../support/service.ts';
import { type SampleSchema, sampleBody } from './samples.ts';

// Issue 33, item 1: every route that takes a JSON body, enumerated from the app's route table (so a
// route added later is covered without touching this file), refuses a field its schema does not
// name with 400 validation_error naming it, and JSON nested deeper than MAX_JSON_DEPTH with 400,
// before any work: nothing is stored, audited or changed. Dashboard forms take no JSON at all (415).
// Audit rows keep only the fields the change knows, bounded in size.

/** `{"a":[{"a":[…]}]}` nested `depth` levels, as text (built without recursion). */
function nested(depth: number): string {
  const open = Array.from({ length: depth }, (_, i) => (i % 2 === 0 ? '{"a":' : '[')).join('');
  const close = Array.from({ length: depth }, (_, i) => (i % 2 === 0 ? '}' : ']'))
    .reverse()
    .join('');
  return `${open}1${close}`;
}

let svc: TestService;
let owner: TestOwner;
let bot: Awaited<ReturnType<typeof activeBot>>;

beforeAll(async () => {
  svc = await createTestService({
    env: { REGISTRATION_RATE_LIMIT_PER_HOUR: '1000000', CHECKOUT_RATE_LIMIT_PER_HOUR: '1000000' },
  });
  owner = await createOwner(svc);
  bot = await activeBot(svc, owner, { fundCents: 5000 });
});
afterAll(async () => {
  await svc.close();
});

const fill = (url: string) =>
  url.replace(/:(\w+)/g, (_m, name: string) =>
    name === 'bot_id'
      ? bot.bot_id
      : name === 'rail_key'
        ? 'card_wallet'
        : name === 'profile_index'
          ? '1'
          : name === 'payment_id' || name === 'confirmation_id'
            ? 'chk_aaaaaaaaaaaaaaaa'
            : `${name.replace(/_id$/, '')}_aaaaaaaaaaaaaaaa`,
  );
const authFor = (url: string) =>
  url.startsWith('/api/v1/bot/') ? bot.auth : url.startsWith('/api/v1/owner/') ? owner.auth : {};

async function snapshot(): Promise<string> {
  const rows = await svc.ctx.db.query<{ audit: number; events: number; ledger: number; bots: number }>(
    `SELECT (SELECT count(*) FROM audit_log)::int AS audit, (SELECT count(*) FROM events)::int AS events,
            (SELECT count(*) FROM ledger_entries)::int AS ledger, (SELECT count(*) FROM bots)::int AS bots`,
  );
  return JSON.stringify(rows[0]);
}

describe('JSON bodies on every route of the route table', () => {
  it('an unknown field is 400 validation_error naming it, on every body route; nothing changes', async () => {
    const before = await snapshot();
    const all = routeTable(svc.app).filter((r) => r.schema?.body !== undefined && r.json);
    // The one body open on purpose: the service's own shop pages stand for a third-party shop.
    const open = all.filter(
      (r) =>
        (r.schema?.body as { additionalProperties?: unknown } | undefined)?.additionalProperties === true,
    );
    expect(open.map((r) => r.url)).toEqual(['/merchant/:shop/:product/order']);
    const bodyRoutes = all.filter((r) => !open.includes(r));
    expect(bodyRoutes.length).toBeGreaterThanOrEqual(19);
    const checked: string[] = [];
    for (const route of bodyRoutes) {
      const what = `${route.method} ${route.url}`;
      const body = { ...sampleBody(route.schema?.body as SampleSchema), zz_not_a_field: 'x'.repeat(900_000) };
      const res = await svc.app.inject({
        method: route.method as 'POST',
        url: fill(route.url),
        headers: authFor(route.url),
        payload: body,
      });
      expect(res.statusCode, `${what} → ${res.body.slice(0, 300)}`).toBe(400);
      expect(res.json(), what).toMatchObject({ error: 'validation_error', field: 'zz_not_a_field' });
      expect(res.json().message, what).toContain('zz_not_a_field');
      checked.push(what);
    }
    // The routes of the issue and the bot-facing ones are among them.
    expect(checked).toEqual(
      expect.arrayContaining([
        'PUT /api/v1/owner/guardrails',
        'POST /api/v1/owner/bots/:bot_id/wallet/fund',
        'POST /api/v1/owner/claims',
        'POST /api/v1/owner/tokens',
        'PUT /api/v1/owner/bots/:bot_id/rails/:rail_key',
        'POST /api/v1/owner/bots/:bot_id/cards',
        'POST /api/v1/bots/register',
        'POST /api/v1/bot/merchant/checkout',
        'POST /api/v1/bot/messages/ack',
      ]),
    );
    expect(await snapshot()).toBe(before);
  });

  it(`nesting deeper than ${MAX_JSON_DEPTH} levels is 400 before any work, on every body route (20,000 deep included)`, async () => {
    const before = await snapshot();
    const bodyRoutes = routeTable(svc.app).filter((r) => r.schema?.body !== undefined && r.json);
    for (const route of bodyRoutes) {
      for (const depth of [MAX_JSON_DEPTH + 1, 20_000]) {
        const what = `${route.method} ${route.url} depth ${depth}`;
        const res = await svc.app.inject({
          method: route.method as 'POST',
          url: fill(route.url),
          headers: { ...authFor(route.url), 'content-type': 'application/json' },
          payload: nested(depth),
        });
        expect(res.statusCode, `${what} → ${res.body.slice(0, 300)}`).toBe(400);
        // The shop pages answer with their own page; the API with the envelope.
        if (route.url.startsWith('/api/'))
          expect(res.json(), what).toMatchObject({ error: 'validation_error', max_depth: MAX_JSON_DEPTH });
      }
    }
    // The bound is on the body's text, whatever the route: a route without a body schema too, and
    // brackets inside strings do not count.
    const freeze = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/wallet/freeze`,
      headers: { ...owner.auth, 'content-type': 'application/json' },
      payload: nested(20_000),
    });
    expect(freeze.statusCode).toBe(400);
    const brackets = await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: { ...owner.auth, 'content-type': 'application/json' },
      payload: JSON.stringify({ per_transaction_cents: 100, zz: '{'.repeat(1000) }),
    });
    expect(brackets.json()).toMatchObject({ error: 'validation_error', field: 'zz' });
    expect(await snapshot()).toBe(before);
    // At the bound it parses (and then meets the schema).
    const atBound = await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: { ...owner.auth, 'content-type': 'application/json' },
      payload: nested(MAX_JSON_DEPTH),
    });
    expect(atBound.json()).toMatchObject({ error: 'validation_error', field: 'a' });
  });

  it('a nested unknown field is named by its path (an owner body and a bot body)', async () => {
    const start = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/cards`,
      headers: owner.auth,
      payload: {},
    });
    const card = start.json();
    const activation = splitCard({ ...card, bot_id: bot.bot_id }).activation as unknown as {
      profiles: Array<Record<string, unknown>>;
    };
    activation.profiles[2]!.full_number = '4111111111111111';
    const res = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/cards/${card.card_id}/activate`,
      headers: owner.auth,
      payload: activation,
    });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ error: 'validation_error', field: 'profiles.2.full_number' });
    const schedule = await svc.app.inject({
      method: 'POST',
      url: `/api/v1/owner/bots/${bot.bot_id}/schedules`,
      headers: owner.auth,
      payload: {
        cron: '0 9 * * *',
        timezone: 'UTC',
        instructions: {
          profile_index: 1,
          merchant_name: 'Shop',
          merchant_url: 'https://shop.example.com',
          item_name: 'Thing',
          amount_cents: 100,
          currency: 'EUR',
        },
      },
    });
    expect(schedule.json()).toMatchObject({ error: 'validation_error', field: 'instructions.currency' });
  });

  it('dashboard forms take no JSON: 415, never a change', async () => {
    const before = await snapshot();
    const forms = routeTable(svc.app).filter((r) => !r.json && r.method === 'POST');
    expect(forms.filter((r) => !r.dashboard).map((r) => r.url)).toEqual([]);
    expect(forms.length).toBeGreaterThan(20);
    for (const route of forms) {
      const res = await svc.app.inject({
        method: 'POST',
        url: fill(route.url),
        headers: { 'content-type': 'application/json' },
        payload: JSON.stringify({ _csrf: 'x', amount: '5' }),
      });
      expect(res.statusCode, `${route.url} → ${res.statusCode}`).toBe(415);
    }
    expect(await snapshot()).toBe(before);
  });

  it('audit rows keep the known fields only, bounded in size', async () => {
    const res = await svc.app.inject({
      method: 'PUT',
      url: '/api/v1/owner/guardrails',
      headers: owner.auth,
      payload: { per_transaction_cents: 2500 },
    });
    expect(res.statusCode).toBe(200);
    const rows = await svc.ctx.db.query<{ details: Record<string, unknown> }>(
      `SELECT details FROM audit_log WHERE owner_id = $1 AND action = 'master_guardrails.updated'
        ORDER BY id DESC LIMIT 1`,
      [owner.id],
    );
    expect(rows[0]!.details).toEqual({ per_transaction_cents: 2500 });
    const longest = await svc.ctx.db.query<{ n: number }>(
      'SELECT coalesce(max(length(details::text)), 0)::int AS n FROM audit_log',
    );
    expect(longest[0]!.n).toBeLessThanOrEqual(AUDIT_DETAILS_MAX);
  });
});
