import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SHOPS } from '../../src/merchants/catalog.ts';
import { createTestService, type TestService } from '../support/service.ts';
import { html, world } from './helpers.ts';

// The shops the service serves at /merchant/<slug>: pages a bot can visit and a card form that
// takes the decoy profiles' card details; never indexed, never in the API document.

let svc: TestService;
beforeAll(async () => {
  svc = await createTestService();
});
afterAll(async () => {
  await svc.close();
});

function expectNoIndex(res: { headers: Record<string, unknown>; body: string }) {
  expect(res.headers['x-robots-tag']).toBe('noindex, nofollow');
  expect(res.body).toContain('<meta name="robots" content="noindex, nofollow">');
}

const FORBIDDEN = /decoy|fake|dummy|honeypot|not a real|test shop/i;

describe('shop pages', () => {
  it('a dozen shops across categories, each with a front page and product pages, marked noindex', async () => {
    expect(SHOPS.length).toBeGreaterThanOrEqual(12);
    expect(new Set(SHOPS.map((s) => s.categories[0])).size).toBeGreaterThanOrEqual(10);
    for (const shop of SHOPS) {
      const front = await svc.app.inject({ url: `/merchant/${shop.slug}` });
      expect(front.statusCode).toBe(200);
      expect(front.headers['content-type']).toContain('text/html');
      expectNoIndex(front);
      expect(front.body).toContain(html(shop.name));
      expect(front.body).not.toMatch(FORBIDDEN);
      for (const product of shop.products) {
        expect(front.body).toContain(`/merchant/${shop.slug}/${product.slug}`);
        const page = await svc.app.inject({ url: `/merchant/${shop.slug}/${product.slug}` });
        expect(page.statusCode).toBe(200);
        expectNoIndex(page);
        expect(page.body).toContain(`$${(product.priceCents / 100).toFixed(2)}`);
        expect(page.body).toContain(html(product.name));
        expect(page.body).toContain(`action="/merchant/${shop.slug}/${product.slug}/order"`);
        expect(page.body).not.toMatch(FORBIDDEN);
      }
    }
  });

  it('unknown shops and products are 404 pages, also noindex', async () => {
    for (const url of [
      '/merchant/no-such-shop',
      '/merchant/northwind-books/no-such-book',
      '/merchant/Bad_Slug!',
    ]) {
      const res = await svc.app.inject({ url });
      expect([400, 404]).toContain(res.statusCode);
      expect(res.headers['x-robots-tag']).toBe('noindex, nofollow');
    }
  });

  it('takes an order paid with a decoy profile from the profiles file, and keeps no card number in the logs', async () => {
    const w = await world(svc);
    const decoy = w.card.file.profiles.find((p) => p.profile_index === w.card.decoyIndex)!;
    // The bot completes the number with the 3 digits an approved checkout returns for that profile.
    const digits = await svc.app.inject({
      method: 'PATCH',
      url: `/api/v1/owner/bots/${w.bot.bot_id}/cards/${w.card.card_id}`,
      headers: w.owner.auth,
      payload: { approval_mode: 'auto_approve_under_threshold', approval_threshold_cents: 10_000 },
    });
    expect(digits.statusCode).toBe(200);
    const approved = await svc.app.inject({
      method: 'POST',
      url: '/api/v1/bot/merchant/checkout',
      headers: w.bot.auth,
      payload: {
        profile_index: w.card.decoyIndex,
        merchant_name: 'Northwind Books',
        merchant_url: 'http://localhost:8080/merchant/northwind-books/bookmark',
        item_name: 'Brass Bookmark',
        amount_cents: 399,
        category: 'books',
      },
    });
    expect(approved.statusCode, approved.body).toBe(200);
    const number = (decoy.card_number as string).replace('***', approved.json().missing_digits);
    const order = await svc.app.inject({
      method: 'POST',
      url: '/merchant/northwind-books/bookmark/order',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: new URLSearchParams({
        quantity: '1',
        cardholder_name: decoy.cardholder_name,
        card_number: number,
        expiry_month: approved.json().expiry_month,
        expiry_year: approved.json().expiry_year,
      }).toString(),
    });
    expect(order.statusCode, order.body).toBe(200);
    expectNoIndex(order);
    expect(order.headers['cache-control']).toBe('no-store');
    expect(order.body).toContain('Thank you for your order');
    expect(order.body).toContain('$3.99');
    expect(svc.logs()).not.toContain(number);
  });

  it('declines a bad card number, a past expiry, a missing name (402 with the form again)', async () => {
    const base = {
      cardholder_name: 'Alex Miller',
      card_number: '4242424242424242',
      expiry_month: '12',
      expiry_year: '2031',
    };
    const cases: Array<[Record<string, string>, string]> = [
      [{ card_number: '4242424242424241' }, 'card number'],
      [{ card_number: '12ab' }, 'card number'],
      [{ expiry_year: '2020' }, 'expired'],
      [{ expiry_month: '13' }, 'month'],
      [{ cardholder_name: ' ' }, 'name'],
    ];
    for (const [change, text] of cases) {
      const res = await svc.app.inject({
        method: 'POST',
        url: '/merchant/pixel-parts/usb-c-cable/order',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        payload: new URLSearchParams({ ...base, ...change }).toString(),
      });
      expect(res.statusCode).toBe(402);
      expect(res.body).toContain('role="alert"');
      expect(res.body.toLowerCase()).toContain(text);
      expectNoIndex(res);
    }
    const ok = await svc.app.inject({
      method: 'POST',
      url: '/merchant/pixel-parts/usb-c-cable/order',
      payload: base,
    });
    expect(ok.statusCode).toBe(200);
  });

  it('is not part of the API document', async () => {
    const doc = svc.app.swagger() as { paths: Record<string, unknown> };
    expect(Object.keys(doc.paths).filter((p) => p.startsWith('/merchant'))).toEqual([]);
    expect(JSON.stringify(doc)).not.toMatch(/decoy/i);
  });
});
