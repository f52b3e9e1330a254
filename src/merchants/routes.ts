import { randomInt } from 'node:crypto';
import formbody from '@fastify/formbody';
import type { Static } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import type { App } from '../platform/http.ts';
import { isLuhnValid } from '../cards/decoys.ts';
import type { AppContext } from '../platform/context.ts';
import { centsToUsd } from '../platform/money.ts';
import { findProduct, findShop, type Product, type Shop } from './catalog.ts';
import { OrderBody, ProductParams, SlugParams } from './schemas.ts';

// The shop pages at /merchant/<slug>: a front page, a product page with an order form, and the
// form's answer. They behave like a small web shop that takes a card (any Luhn-valid number with a
// future expiry — the decoy profiles' numbers are), keep nothing, and ask search engines to stay
// away (meta robots + X-Robots-Tag). Hidden from /openapi.json: they are pages, not API.

function esc(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] ?? c,
  );
}

const price = (cents: number) => `$${centsToUsd(cents).toFixed(2)}`;

function page(shop: Shop, title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<title>${esc(title)} · ${esc(shop.name)}</title>
<style>
body{font-family:system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#fff;border-bottom:1px solid #ddd;padding:1rem 2rem}
header a{color:inherit;text-decoration:none;font-weight:600;font-size:1.3rem}
header p{margin:.2rem 0 0;color:#666}
main{max-width:46rem;margin:2rem auto;padding:0 1rem}
ul{list-style:none;padding:0}li{padding:.6rem 0;border-bottom:1px solid #eee;display:flex;justify-content:space-between}
form{display:grid;gap:.6rem;max-width:24rem;background:#fff;padding:1rem;border:1px solid #ddd}
label{display:grid;gap:.2rem;font-size:.9rem}input{padding:.4rem;font-size:1rem}
button{padding:.6rem;font-size:1rem;background:#1f6feb;color:#fff;border:0;cursor:pointer}
.price{font-size:1.4rem;font-weight:600}.error{color:#b00020}
footer{color:#888;font-size:.8rem;text-align:center;margin:3rem 0}
</style>
</head>
<body>
<header><a href="/merchant/${esc(shop.slug)}">${esc(shop.name)}</a><p>${esc(shop.tagline)}</p></header>
<main>
${body}
</main>
<footer>&copy; ${esc(shop.name)} · Secure checkout · Prices include taxes</footer>
</body>
</html>`;
}

function orderForm(shop: Shop, product: Product, error?: string): string {
  return `<h1>${esc(product.name)}</h1>
<p class="price">${price(product.priceCents)}</p>
<p>In stock. Ships within 2 business days.</p>
${error ? `<p class="error" role="alert">${esc(error)}</p>` : ''}
<form method="post" action="/merchant/${esc(shop.slug)}/${esc(product.slug)}/order" autocomplete="off">
<label>Quantity <input name="quantity" value="1" inputmode="numeric" pattern="[0-9]{1,2}"></label>
<label>E-mail for the receipt <input name="email" type="email"></label>
<label>Name on card <input name="cardholder_name" required></label>
<label>Card number <input name="card_number" inputmode="numeric" autocomplete="cc-number" required></label>
<label>Expiry month (MM) <input name="expiry_month" inputmode="numeric" maxlength="2" required></label>
<label>Expiry year (YYYY) <input name="expiry_year" inputmode="numeric" maxlength="4" required></label>
<button type="submit">Pay ${price(product.priceCents)}</button>
</form>`;
}

function send(reply: FastifyReply, status: number, html: string, noStore = false) {
  reply
    .status(status)
    .header('content-type', 'text/html; charset=utf-8')
    .header('x-robots-tag', 'noindex, nofollow')
    .header('referrer-policy', 'no-referrer')
    .header('x-content-type-options', 'nosniff')
    .header(
      'content-security-policy',
      "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
    )
    .header('cache-control', noStore ? 'no-store' : 'public, max-age=300');
  return reply.send(html);
}

function notFoundPage(reply: FastifyReply) {
  reply
    .status(404)
    .header('content-type', 'text/html; charset=utf-8')
    .header('x-robots-tag', 'noindex, nofollow');
  return reply.send(
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex, nofollow"><title>Not found</title></head><body><h1>Page not found</h1></body></html>',
  );
}

/** Checks the order form like a card processor's front end would. Returns the problem, if any. */
export function orderProblem(body: Static<typeof OrderBody>, now: number): string | undefined {
  const number = (body.card_number ?? '').replace(/[\s-]/g, '');
  if (!body.cardholder_name?.trim()) return 'Enter the name on the card.';
  if (!/^\d{13,19}$/.test(number) || !isLuhnValid(number)) return 'The card number is not valid.';
  const month = Number(body.expiry_month);
  const year = Number(body.expiry_year);
  if (!/^\d{1,2}$/.test(body.expiry_month ?? '') || month < 1 || month > 12)
    return 'The expiry month is not valid.';
  if (!/^\d{4}$/.test(body.expiry_year ?? '')) return 'The expiry year is not valid.';
  const d = new Date(now);
  if (year < d.getUTCFullYear() || (year === d.getUTCFullYear() && month < d.getUTCMonth() + 1))
    return 'The card has expired.';
  if (body.quantity !== undefined && !/^\d{1,2}$/.test(body.quantity)) return 'The quantity is not valid.';
  return undefined;
}

export async function registerMerchantRoutes(app: App, ctx: AppContext): Promise<void> {
  // Form posts are parsed only inside this scope (Fastify encapsulation), not for the JSON API.
  await app.register(async (scope: App) => {
    await scope.register(formbody, { bodyLimit: 8192 });
    // A malformed request here is answered as a page, not as an API error envelope.
    scope.setErrorHandler((error: { statusCode?: number }, _request, reply) => {
      const status = typeof error.statusCode === 'number' && error.statusCode < 500 ? error.statusCode : 400;
      reply
        .status(status)
        .header('content-type', 'text/html; charset=utf-8')
        .header('x-robots-tag', 'noindex, nofollow');
      return reply.send(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex, nofollow"><title>Bad request</title></head><body><h1>Something went wrong with your request.</h1></body></html>',
      );
    });

    scope.get('/merchant/:shop', { schema: { hide: true, params: SlugParams } }, async (request, reply) => {
      const shop = findShop(request.params.shop);
      if (!shop) return notFoundPage(reply);
      const items = shop.products
        .map(
          (x) =>
            `<li><a href="/merchant/${esc(shop.slug)}/${esc(x.slug)}">${esc(x.name)}</a><span>${price(x.priceCents)}</span></li>`,
        )
        .join('\n');
      return send(reply, 200, page(shop, 'Shop', `<h1>${esc(shop.name)}</h1><ul>${items}</ul>`));
    });

    scope.get(
      '/merchant/:shop/:product',
      { schema: { hide: true, params: ProductParams } },
      async (request, reply) => {
        const shop = findShop(request.params.shop);
        const product = shop && findProduct(shop, request.params.product);
        if (!shop || !product) return notFoundPage(reply);
        return send(reply, 200, page(shop, product.name, orderForm(shop, product)));
      },
    );

    scope.post(
      '/merchant/:shop/:product/order',
      { schema: { hide: true, params: ProductParams, body: OrderBody } },
      async (request, reply) => {
        const shop = findShop(request.params.shop);
        const product = shop && findProduct(shop, request.params.product);
        if (!shop || !product) return notFoundPage(reply);
        const problem = orderProblem(request.body ?? {}, ctx.clock.now());
        if (problem) {
          return send(reply, 402, page(shop, product.name, orderForm(shop, product, problem)), true);
        }
        const quantity = Math.max(1, Number(request.body.quantity ?? '1'));
        const order = `${shop.slug.slice(0, 2).toUpperCase()}-${randomInt(100000, 999999)}`;
        const total = product.priceCents * quantity;
        return send(
          reply,
          200,
          page(
            shop,
            'Order confirmed',
            `<h1>Thank you for your order</h1>
<p>Order number <strong>${order}</strong></p>
<p>${quantity} × ${esc(product.name)} — ${price(total)} charged to your card.</p>
<p>A receipt will be sent to your e-mail address.</p>`,
          ),
          true,
        );
      },
    );
  });
}
