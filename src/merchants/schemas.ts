import { Type } from '@sinclair/typebox';

// Request schemas of the shop pages (routes.ts); handler types are their Static<> types.

export const SlugParams = Type.Object({ shop: Type.String({ pattern: '^[a-z0-9-]{1,60}$' }) });
export const ProductParams = Type.Object({
  shop: Type.String({ pattern: '^[a-z0-9-]{1,60}$' }),
  product: Type.String({ pattern: '^[a-z0-9-]{1,60}$' }),
});
// Open on purpose: these pages stand for a third-party shop, whose order form, like a real one,
// ignores fields it does not read (a browser's submit button, a bot's extra JSON), rather than the
// API's closed bodies (src/platform/bodies.ts). Nothing of the order is stored.
export const OrderBody = Type.Object(
  {
    cardholder_name: Type.Optional(Type.String({ maxLength: 200 })),
    card_number: Type.Optional(Type.String({ maxLength: 40 })),
    expiry_month: Type.Optional(Type.String({ maxLength: 4 })),
    expiry_year: Type.Optional(Type.String({ maxLength: 6 })),
    email: Type.Optional(Type.String({ maxLength: 254 })),
    quantity: Type.Optional(Type.String({ maxLength: 3 })),
  },
  { additionalProperties: true },
);
